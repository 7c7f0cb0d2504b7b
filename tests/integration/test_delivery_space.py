"""The free-space precheck (spec/evidence.md §6, spec/lifecycle.md §13.1): with the project folder on a
small tmpfs, relay_extract and relay_finish fail before pulling anything, with space-shortfall
naming the bytes needed, free and short, and keep the guest; once the guest's data fits, the
same guest finishes on the same small volume.

Needs root (to mount the tmpfs).
"""

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests, skip  # noqa: E402
from delivery_support import files_under, structured, text_of, variants  # noqa: E402

TMPFS_BYTES = 2 * 1024 * 1024
BIG_MIB = 4


def mount_tmpfs():
    if os.geteuid() != 0:
        skip("mounting a small tmpfs for the project folder needs root")
    point = tempfile.mkdtemp(prefix="relay-dl-tmpfs-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % TMPFS_BYTES, "tmpfs", point],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        os.rmdir(point)
        skip("cannot mount a tmpfs here: %s" % p.stderr.decode().strip())
    return point


def unmount(point):
    subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.rmdir(point)
    except OSError:
        pass


def check_shortfall(res, operation):
    assert res["isError"] is True, text_of(res)
    err = structured(res)["error"]
    assert err["code"] == "space-shortfall", err
    m = re.search(r"%s needs (\d+) bytes; (\d+) free; (\d+) short; the guest is kept" % operation, err["message"])
    assert m, err["message"]
    needed, free, short = (int(x) for x in m.groups())
    assert needed > free and short == needed - free and needed >= BIG_MIB << 20, (needed, free, short)
    state = structured(res)["guestState"]
    assert state["phase"] == "staged" and state["active"] is True, state


def test_space_shortfall_keeps_the_guest(binary):
    point = mount_tmpfs()
    try:
        for kind in ("shim", "local"):
            project = os.path.join(point, kind)
            os.mkdir(project, 0o700)
            for env in variants(binary, kinds=(kind,), project=project):
                shortfall(env)
            subprocess.run(["rm", "-rf", project])
    finally:
        unmount(point)


def shortfall(env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r, extractions=[{"name": "bulk", "path": "bulk.bin"}])
        g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
        env.stage(r, g)
        env.run(r, g, "head -c %d /dev/zero > bulk.bin" % (BIG_MIB << 20), reason="a large output")
        env.wait_downloads(r, g, lambda d: d["downloaded"] == 1 and d["inFlight"] == 0)

        # relay_extract: the declared output does not fit.
        x = r.call_tool("relay_extract", {"guest": g, "names": ["bulk"]})
        check_shortfall(x, "extract")
        assert not os.path.exists(os.path.join(evidence, "extractions", "bulk")), files_under(evidence)

        # relay_finish: the extraction's precheck stops it.
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        check_shortfall(fin, "finish")
        assert not os.path.exists(os.path.join(evidence, "manifest.json"))

        # The recording itself does not fit: the state pull's precheck stops it, before
        # anything of the recording is pulled.
        env.diag(r, g, "mv %s/workspace/bulk.bin %s/state/bulk.bin" % (root, root))
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        check_shortfall(fin, "finish")
        assert [e["name"] for e in structured(fin)["incompleteExtractions"]] == ["bulk"], structured(fin)
        assert not os.path.exists(os.path.join(evidence, "state", "bulk.bin"))
        assert not any("/state/" in p for p in files_under(os.path.dirname(evidence))
                       if ".finalization-attempts/" in p and "/previous/" not in p)
        held = [x for x in structured(r.call_tool("relay_status"))["guests"] if x["guest"] == g]
        assert held and held[0]["phase"] == "staged", held

        # Room is made in the guest: the same guest finishes on the same small volume.
        env.diag(r, g, "rm %s/state/bulk.bin" % root)
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is False, text_of(fin)
        assert structured(fin)["deliveryVerified"] is True


if __name__ == "__main__":
    run_tests(globals())
