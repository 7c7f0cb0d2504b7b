#!/usr/bin/env python3
"""Why the dockerd fixture runs in a mount namespace of its own, and what the relay says when an
engine loses its view of a running guest (docker_support.py; docs/machine-docker.md, "Known
problems").

dockerd in this host's namespace makes its data root a shared mount, so a running container's
root (its overlay "merged" folder) is a peer of the copies any other process gets when it makes
a mount namespace without making it private. An unmount there propagates back: dockerd's own
mount of the container's root is gone while the container runs, and its archive API reads and
writes an empty folder. This test does exactly that from a namespace of its own (`unshare -m
--propagation unchanged umount -l <merged>`), and then checks that the relay refuses an
extraction with the reason instead of "does not exist". With the fixture's private namespace the container's
root is not even visible in this host's namespace, so no other process can unmount it."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, dockerd_missing, plugin_missing, structured, text_of  # noqa: E402


def merged_mounts(eng):
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if eng.dir in ln and ln.split()[4].endswith("/merged")]


def lose_the_view(eng, binary, resident):
    """A guest whose container root the engine no longer sees (the unmount above), and an
    extraction from it: refused with the reason when the pull takes the engine's archive API
    (MCP_RELAY_RESIDENT=off); pulled from inside the guest over its resident channel, which
    the engine's view does not touch, otherwise."""
    image = eng.image("minimal")
    with eng.relay(binary, {"minimal": image}, MCP_RELAY_RESIDENT=resident) as r:
        r.initialize()
        acq = acquire(r, "minimal", extractions=[{"name": "report", "path": "out/report.txt"}])
        g = acq["guest"]
        assert r.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
        res = r.call_tool("relay_script", {"guest": g, "language": "shell", "inline": True,
                                           "code": "mkdir -p out && echo x > out/report.txt"}, timeout=180)
        assert res["isError"] is False, text_of(res)
        merged = merged_mounts(eng)
        assert len(merged) == 1, merged
        # Another process's mount namespace, its mounts left peers of ours, and an unmount in it.
        u = subprocess.run(["unshare", "-m", "--propagation", "unchanged", "umount", "-l", merged[0]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert u.returncode == 0, u.stderr
        assert merged_mounts(eng) == [], "the unmount did not propagate back"
        res = r.call_tool("relay_extract", {"guest": g, "names": ["report"]}, timeout=120)
        text = text_of(res)
        if resident == "off":
            # The engine's archive API now looks into an empty folder: refused with the reason.
            assert res["isError"], text
            assert "no longer sees the files of the running container" in text, text
        else:
            assert res["isError"] is False, text
            with open(os.path.join(structured(res)["extractions"][0]["destination"], "report.txt")) as f:
                assert f.read() == "x\n"
        assert eng.inspect(acq["vm"])["State"]["Running"] is True  # the guest itself runs on
        r.call_tool("relay_release", {"guest": g}, timeout=120)


def test_lost_view_is_named(binary):
    why = plugin_missing(binary) or dockerd_missing()
    if why:
        skip(why)
    with Engine("docker", host_mounts=True) as eng:
        lose_the_view(eng, binary, "off")
        lose_the_view(eng, binary, "on")
    # The fixture's own namespace: nothing of dockerd's is mounted in this host's.
    with Engine("docker") as eng:
        image = eng.image("minimal")
        with eng.relay(binary, {"minimal": image}) as r:
            r.initialize()
            acq = acquire(r, "minimal")
            assert eng.inspect(acq["vm"])["State"]["Running"] is True
            assert merged_mounts(eng) == [], merged_mounts(eng)
            rel = r.call_tool("relay_release", {"guest": acq["guest"]}, timeout=120)
            assert rel["isError"] is False, text_of(rel)


if __name__ == "__main__":
    run_tests(globals())
