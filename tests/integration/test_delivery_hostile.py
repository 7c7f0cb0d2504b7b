"""A hostile guest (spec/evidence.md §5.4): the guest is not trusted, so a step download refuses the
whole archive on an absolute path, a `..`, a symbolic link, a hard link, a device, a FIFO, an
entry over its declared size, an entry whose SHA-256 differs from the receipt, and a truncated
archive, and nothing is ever written outside the package.

The guest turns hostile the way a compromised guest would: a diagnostic shell script replaces
the staged receiver R/receiver with a wrapper that hands every command to the real receiver
except `archive`, whose honest archive it rewrites into a malicious one (and whose frame it
rewrites to match, so the archive arrives intact and the host's reader is what must refuse it).
Afterwards relay_finish, still facing the hostile archive, falls back to pulling the recording
one file at a time (`archive-fallback`), each file checked against the guest's scan, and the
package verifies.

A resident `receiver serve` (spec/guest.md §17) never runs the file on disk, so the serve running
is ended first (delivery_support.replace_receiver): on machine-local the archives then come by the
one-shot path, and, in the second test, from a hostile resident receiver over the open channel.
"""

import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import (download_records, events, files_under, replace_receiver, review,  # noqa: E402
                              structured, text_of, variants)

# Rewrites the honest archive the real receiver wrote into a hostile one (Python standard
# library only; runs in the guest).
HOSTILE_PY = r'''
import hashlib, io, json, os, subprocess, sys, tarfile
real, args = sys.argv[1], sys.argv[2:]
root = os.path.dirname(real)
mode, canary = open(os.path.join(root, ".hostile-mode")).read().split()
out = args[args.index("--out") + 1]
p = subprocess.run([real] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
if p.returncode != 0:
    sys.stdout.write(p.stdout.decode()); sys.stderr.write(p.stderr.decode()); sys.exit(p.returncode)
honest = open(out, "rb").read()
src = tarfile.open(fileobj=io.BytesIO(honest), format=tarfile.USTAR_FORMAT)
members = [(m, src.extractfile(m).read()) for m in src.getmembers()]
buf = io.BytesIO()
dst = tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT)
def add(name, data, kind=tarfile.REGTYPE, link=""):
    ti = tarfile.TarInfo(name); ti.type = kind; ti.mode = 0o600; ti.mtime = 0; ti.linkname = link
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE): ti.devmajor, ti.devminor = 1, 3
    ti.size = len(data) if kind == tarfile.REGTYPE else 0
    dst.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
if mode == "forged":
    # A different receipt with an index that agrees with it: only the host's own copy of the
    # receipt (pulled right after the run) can tell.
    index = json.loads(members[0][1])
    for j, (m, data) in enumerate(members):
        if "/receipts/" in m.name:
            data = data.replace(b'"stdout"', b'"stdout" ', 1)  # other bytes, still a receipt
            members[j] = (m, data)
            for e in index:
                if e["path"] == m.name:
                    e["bytes"], e["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    members[0] = (members[0][0], json.dumps(index, separators=(",", ":")).encode())
for i, (m, data) in enumerate(members):
    first = i == 1
    if first and mode == "absolute":
        add(canary + "/absolute.txt", data)
    elif first and mode == "dotdot":
        add("state/" + "../" * 24 + canary.lstrip("/") + "/dotdot.txt", data)
    elif first and mode == "symlink":
        add(m.name, b"", tarfile.SYMTYPE, canary + "/via-link")
        add(m.name, data)
    elif first and mode == "hardlink":
        add(m.name, b"", tarfile.LNKTYPE, members[0][0].name)
    elif first and mode == "device":
        add(m.name, b"", tarfile.CHRTYPE)
    elif first and mode == "fifo":
        add(m.name, b"", tarfile.FIFOTYPE)
    elif first and mode == "oversize":
        add(m.name, data + b"X" * 4096)
    elif first and mode == "hash":
        add(m.name, bytes([data[0] ^ 0x20]) + data[1:])
    else:
        add(m.name, data)
dst.close()
hostile = buf.getvalue()
if mode == "truncated":
    hostile = honest[: len(honest) // 2 + 100]
with open(out, "wb") as f:
    f.write(hostile)
print(json.dumps({"path": out, "sha256": hashlib.sha256(hostile).hexdigest(), "bytes": len(hostile),
                  "entries": len(members) - 1}))
'''

WRAPPER = '''#!/bin/sh
# A compromised receiver: every command goes to the real one, except archive.
R=$(dirname "$0")
if [ "$1" = archive ] && [ -f "$R/.hostile-mode" ]; then
  exec python3 "$R/.hostile.py" "$R/receiver.real" "$@"
fi
exec "$R/receiver.real" "$@"
'''

# Words the refusal of each mode must contain.
WHY = {"absolute": ["absolute"], "dotdot": [".."], "symlink": ["link", "regular file"],
       "hardlink": ["link", "regular file"], "device": ["device", "regular file", "type"],
       "fifo": ["FIFO", "fifo", "regular file", "type"], "oversize": ["its index says", "size"],
       "hash": ["SHA-256", "sha256"], "forged": ["receipts/"], "truncated": ["truncat"]}

MODES = ["absolute", "dotdot", "symlink", "hardlink", "device", "fifo", "oversize", "hash", "forged",
         "truncated"]


def guest_with_one_honest_step(env, r, resident=False):
    """Acquires and stages a guest, runs one honest step and waits for its download, then
    replaces the guest's receiver with the hostile one (set_mode picks its behaviour; with
    `resident` a hostile resident receiver answers over the channel, delivery_support.SERVE_PROXY).
    Returns (acquire result, the honest run's executionId)."""
    acq = env.acquire(r)
    g, root = acq["guest"], acq["guestRoot"]
    env.stage(r, g)
    honest = structured(env.run(r, g, "echo honest"))["executionId"]
    env.wait_downloads(r, g, lambda d: d["downloaded"] == 1 and d["inFlight"] == 0)
    replace_receiver(env, r, g, root, WRAPPER, resident=resident,
                     then="cat > %s/.hostile.py <<'RELAY_EOF'\n%s\nRELAY_EOF" % (root, HOSTILE_PY))
    return acq, honest


def set_mode(env, r, g, root, mode, canary):
    env.diag(r, g, "printf '%%s %%s\\n' %s %s > %s/.hostile-mode" % (mode, canary, root))


def wait_record(evidence, eid, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        rec = download_records(evidence).get(eid)
        if rec and rec["status"] not in ("queued",):
            return rec
        if time.monotonic() > deadline:
            raise AssertionError("the step download of %s never ended: %r" % (eid, rec))
        time.sleep(0.05)


def channel_pulls(evidence):
    """How many pulls host/transfers/ records as taken over the resident channel."""
    n = 0
    for name in os.listdir(os.path.join(evidence, "host", "transfers")):
        with open(os.path.join(evidence, "host", "transfers", name)) as f:
            n += sum(1 for t in json.load(f)["transfers"] if t["op"] == "pull" and t["method"] == "channel")
    return n


def outside_package(project, evidence):
    """Files below the project that are neither in the evidence folder nor its sibling records."""
    base = os.path.basename(evidence)
    out = []
    for p in files_under(project):
        top = p.split("/")[0]
        if top != "relay-evidence":
            out.append(p)
            continue
        second = p.split("/")[1]
        if second == base:
            continue
        if second in (base + ".lifecycle.json", base + ".delivery-error.json"):
            continue
        if second in (base + ".lifecycle-events", base + ".finalization-attempts"):
            if second.endswith(".finalization-attempts") and "/previous/" not in p:
                out.append(p)  # staging must be gone once a download ends
            continue
        out.append(p)
    return out


def test_hostile_archives(binary):
    for env in variants(binary):
        hostile_archives(binary, env)


def test_hostile_archives_over_the_resident_channel(binary):
    """The same archives from a hostile resident receiver: each one comes home over the open
    channel (the command's answer and the archive's bytes), and the host refuses it the same way."""
    for env in variants(binary, kinds=("local",)):
        hostile_archives(binary, env, resident=True)


def hostile_archives(binary, env, resident=False):
    canary = tempfile.mkdtemp(prefix="relay-hostile-canary-")
    try:
        with env.relay() as r:
            r.initialize()
            acq, _ = guest_with_one_honest_step(env, r, resident)
            g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
            failed = 0
            for mode in MODES:
                set_mode(env, r, g, root, mode, canary)
                res = env.run(r, g, "echo %s" % mode, reason="hostile archive: %s" % mode)
                eid = structured(res)["executionId"]
                if resident:
                    assert structured(res)["channel"] == "resident", (mode, structured(res).get("channel"))
                rec = wait_record(evidence, eid)
                failed += 1
                errors = " | ".join(a["error"] or "" for a in rec["attempts"])
                print("    %-9s %s" % (mode, errors[:160]), flush=True)
                assert rec["status"] == "failed", (mode, rec)
                assert "archive refused" in errors, (mode, errors)
                assert any(w in errors for w in WHY[mode]), (mode, errors)
                assert len(rec["attempts"]) == 1, (mode, "a refused archive is not retried", rec)
                assert rec["files"] == [], (mode, rec)
                assert not os.path.exists(os.path.join(evidence, "host", "steps", eid)), mode
                assert os.listdir(canary) == [], (mode, os.listdir(canary))
                assert outside_package(env.project, evidence) == [], (mode, outside_package(env.project, evidence))
                d = env.wait_downloads(r, g, lambda d: d["failed"] == failed and d["inFlight"] == 0)
                assert d["paused"] is False, (mode, "a lasting failure does not pause the queue", d)
            print("    every refusal left nothing outside the package", flush=True)
            if resident:
                # Every hostile archive came home over the channel, none by the transport.
                pulled = channel_pulls(evidence)
                print("    archives pulled over the channel: %d" % pulled, flush=True)
                assert pulled >= len(MODES), pulled

            # finish against the same hostile guest: the state archive is refused too, so the
            # recording comes one file at a time, each checked against the guest's scan.
            set_mode(env, r, g, root, "hash", canary)
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            assert structured(fin)["deliveryVerified"] is True
            assert os.listdir(canary) == []
        fallbacks = events(evidence, "archive-fallback")
        assert fallbacks and "archive refused" in fallbacks[0]["details"]["error"], fallbacks
        rc, data, err = review(binary, evidence)
        assert rc == 0, err
        recorded = [s for s in data["steps"] if s["inputMode"] != "diagnostic"]
        assert len(recorded) == 1 + len(MODES), [s["id"] for s in data["steps"]]
        assert outside_package(env.project, evidence) == [], outside_package(env.project, evidence)
    finally:
        shutil.rmtree(canary, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
