#!/usr/bin/env python3
"""Snapshots on the resident channel (spec/guest.md §17 item 5; issue 24 item 4), through the real
binary, transfer-ssh to a real sshd and a real 1280x800 Xvfb (runs_support's ssh-x11 variant):
`receiver serve` keeps one `relay-x11shot --serve` for every shot of every run, so a shot starts
no process and opens no X connection; each after-image is byte for byte the PNG a one-shot
relay-x11shot writes of the same screen (the encoder is deterministic: same pixels, same bytes),
and checked as §11 says; a resident program that was killed is replaced, the run's shots taken
the one-shot way meanwhile; RELAY_RECEIVER_CAPTURE_RESIDENT=off in the guest keeps every shot
one-shot."""
import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import build_dir, make_variant, run, stage, structured, text_of  # noqa: E402


def residents(root):
    """pids of `<root>/bin/relay-x11shot ... --serve` (the ssh fixture's guest is this host)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == (root + "/bin/relay-x11shot").encode() and b"--serve" in argv:
            found.append(int(p))
    return found


def one_shot_sha(binary, display):
    platform = "linux-aarch64" if os.uname().machine in ("aarch64", "arm64") else "linux-x86_64"
    shot = os.path.join(build_dir(binary), "libexec", "mcp-relay", "receivers", platform, "relay-x11shot")
    out = "/tmp/relay-resident-capture-%d.png" % os.getpid()
    if os.path.exists(out):
        os.unlink(out)
    subprocess.run([shot, "--display", display, "--out", out], check=True, stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        data = f.read()
    os.unlink(out)
    return hashlib.sha256(data).hexdigest()


def snap_run(r, guest, display):
    res = run(r, guest, "export DISPLAY=%s\ntrue" % display, snapshots={"afterIntervalMs": 0})
    assert res["isError"] is False, text_of(res)
    s = structured(res)
    assert s["channel"] == "resident", s
    ie = s["imageEvidence"]
    assert ie["status"] == "available" and [x["phase"] for x in ie["snapshots"]] == ["before", "after"], ie
    d = s["imageDelivery"]
    assert d["status"] == "attached", d
    with open(d["image"]["originalPath"], "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == ie["snapshots"][1]["sha256"]
    return ie


def variant(binary, **env):
    if os.geteuid() != 0:
        skip("the sshd fixture needs root")
    v, why = make_variant(binary, "ssh-x11", sshd_env=env)
    if v is None:
        skip(why)
    return v


def staged(v, r, binary):
    """(guest, root, the sha256 of a one-shot capture of the display) of a staged guest."""
    r.initialize()
    g = v.acquire(r)
    assert stage(r, g["guest"])["isError"] is False
    return g["guest"], g["guestRoot"], one_shot_sha(binary, v.display)


def test_one_resident_capture_for_every_shot(binary):
    v = variant(binary)
    try:
        with v.relay() as r:
            guest, root, want = staged(v, r, binary)
            ie = snap_run(r, guest, v.display)
            pids = residents(root)
            assert len(pids) == 1, pids
            for x in ie["snapshots"]:
                assert x["sha256"] == want, (x, want)
            for _ in range(3):
                ie = snap_run(r, guest, v.display)
                assert [x["sha256"] for x in ie["snapshots"]] == [want, want], ie
            assert residents(root) == pids, (residents(root), pids)

            # Killed between runs: the next run's shots are still taken and checked (one-shot while
            # serve finds it gone), and serve starts a new one.
            os.kill(pids[0], 9)
            time.sleep(0.2)
            ie = snap_run(r, guest, v.display)
            assert [x["sha256"] for x in ie["snapshots"]] == [want, want], ie
            again = residents(root)
            assert len(again) == 1 and again != pids, (again, pids)
            snap_run(r, guest, v.display)
            assert residents(root) == again
        # serve ends with the channel, and the resident program with it
        deadline = time.monotonic() + 10
        while residents(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert residents(root) == [], residents(root)
    finally:
        v.cleanup()


def test_resident_capture_off(binary):
    v = variant(binary, RELAY_RECEIVER_CAPTURE_RESIDENT="off")
    try:
        with v.relay() as r:
            guest, root, want = staged(v, r, binary)
            for _ in range(2):
                ie = snap_run(r, guest, v.display)
                assert [x["sha256"] for x in ie["snapshots"]] == [want, want], ie
                assert residents(root) == []
    finally:
        v.cleanup()


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
