#!/usr/bin/env python3
"""Restart with work on the guest (spec/lifecycle.md §8 step 3.7; spec/guest.md: nothing replayed).

The relay is killed with SIGKILL after relay_stage, during a relay_script run and during
relay_finish, then restarted with the same MCP_RELAY_SESSION on the fault shim over reference-machine (whose guest
is this host, so the test counts executions in the guest's workspace directly): the guest
comes back by name, still staged, no run executes twice, later runs are new executions, and
the finish completes with the evidence kept.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from lifecycle_support import (Shim, acquire, guest_entry, kill9, registry_rows, send_call,  # noqa: E402
                               wait_status)

COUNT = 'echo run >> "$RELAY_WORKSPACE/count.txt"; echo ran'


def ready(name):
    def check(s):
        return any(g["guest"] == name and g["phase"] in ("ready", "staged") for g in s["guests"])
    return check


def staged_guest(fake, r):
    got = acquire(r, image=fake.image)
    res = r.call_tool("relay_stage", {"guest": got["guest"]}, timeout=300)
    if res["isError"]:
        raise AssertionError("relay_stage failed: %s" % res["content"][0]["text"])
    return got


def run(r, guest, code, timeout=120):
    res = r.call_tool("relay_script", {"guest": guest, "language": "shell", "inline": True, "code": code},
                      timeout=timeout)
    return res


def count_lines(got):
    path = os.path.join(got["guestRoot"], "workspace", "count.txt")
    try:
        with open(path) as f:
            return len(f.read().splitlines())
    except FileNotFoundError:
        return 0


def cleanup_guest_root(got):
    # The guest root is a host folder (reference-machine's guests are folders of this host);
    # releasing removes it, a failed test may not.
    import shutil
    if got and got.get("guestRoot", "").startswith("/var/tmp/"):
        shutil.rmtree(got["guestRoot"], ignore_errors=True)


def test_sigkill_after_stage_then_restart(binary):
    fake = Shim(binary)
    got = None
    try:
        with fake.relay() as r:
            r.initialize()
            got = staged_guest(fake, r)
            first = run(r, "demo-1", COUNT)
            assert first["isError"] is False, first["content"][0]["text"]
            before = guest_entry(r, "demo-1")
            kill9(r)
        assert count_lines(got) == 1
        with fake.relay() as r:
            r.initialize()
            wait_status(r, ready("demo-1"), what="demo-1 taken back")
            g = guest_entry(r, "demo-1")
            assert g["staged"] is True and g["phase"] == "staged", g
            assert g["recordingSessionId"] == before["recordingSessionId"], (g, before)
            assert g["runs"] == before["runs"], (g, before)
            assert fake.ops("acquire", pid=r.proc.pid) == []
            assert count_lines(got) == 1  # nothing replayed by the restart
            second = run(r, "demo-1", COUNT)
            assert second["isError"] is False, second["content"][0]["text"]
            s2 = second["structuredContent"]
            assert s2["executionId"] != first["structuredContent"]["executionId"]
            assert count_lines(got) == 2
            res = r.call_tool("relay_release", {"guest": "demo-1"}, timeout=300)
            assert res["isError"] is False, res["content"][0]["text"]
        assert registry_rows(fake.registry_text()) == []
    finally:
        cleanup_guest_root(got)
        fake.cleanup()


def test_sigkill_during_a_script_then_restart(binary):
    fake = Shim(binary)
    got = None
    try:
        with fake.relay() as r:
            r.initialize()
            got = staged_guest(fake, r)
            marker = os.path.join(got["guestRoot"], "workspace", "started")
            send_call(r, "relay_script", {"guest": "demo-1", "language": "shell", "inline": True,
                                          "code": 'touch "$RELAY_WORKSPACE/started"; sleep 2; ' + COUNT})
            deadline = time.monotonic() + 60
            while not os.path.exists(marker):
                assert time.monotonic() < deadline, "the script never started"
                time.sleep(0.05)
            kill9(r)
        # The run goes on in the guest without the relay and ends by itself.
        deadline = time.monotonic() + 60
        while count_lines(got) < 1:
            assert time.monotonic() < deadline, "the run did not finish in the guest"
            time.sleep(0.1)
        with fake.relay() as r:
            r.initialize()
            wait_status(r, ready("demo-1"), what="demo-1 taken back")
            assert guest_entry(r, "demo-1")["staged"] is True
            time.sleep(3)  # a replay would have run by now
            assert count_lines(got) == 1
            again = run(r, "demo-1", COUNT)
            assert again["isError"] is False, again["content"][0]["text"]
            assert count_lines(got) == 2  # a new execution, exactly once
            # Finish delivers everything, the run made while no relay was there included.
            res = r.call_tool("relay_finish", {"guest": "demo-1"}, timeout=300)
            assert res["isError"] is False, res["content"][0]["text"]
        receipts = os.path.join(got["evidencePath"], "state", "receiver", "receipts")
        assert len(os.listdir(receipts)) == 2, os.listdir(receipts)
    finally:
        cleanup_guest_root(got)
        fake.cleanup()


def test_sigkill_during_finish_then_restart(binary):
    fake = Shim(binary)
    got = None
    try:
        with fake.relay() as r:
            r.initialize()
            got = staged_guest(fake, r)
            assert run(r, "demo-1", COUNT)["isError"] is False
            # The destroy request of the finish hangs: the relay is killed during it.
            fake.script([{"op": "release", "fault": "delay", "delayMs": 3600000, "times": 1}])
            send_call(r, "relay_finish", {"guest": "demo-1"})
            fake.wait_ops("release", 1, timeout=300)
            kill9(r)
        # The package was delivered and verified before the destroy request.
        manifest = os.path.join(got["evidencePath"], "manifest.json")
        delivered = os.path.exists(manifest)
        assert delivered
        with open(manifest, "rb") as f:
            manifest_bytes = f.read()
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            wait_status(r, lambda s: any(g["guest"] == "demo-1" and g["phase"] not in ("reconciling",)
                                         for g in s["guests"]) or s["closedGuests"],
                        what="demo-1 taken back")
            g = guest_entry(r, "demo-1")
            assert g is not None, "the guest was lost"
            assert g["delivered"] is delivered, g
            assert fake.ops(("acquire", "release"), pid=r.proc.pid) == []  # nothing sent again by itself
            assert count_lines(got) == 1
            res = r.call_tool("relay_finish", {"guest": "demo-1"}, timeout=300)
            print("  after restart: phase %s, delivered %s; relay_finish: %s" % (
                g["phase"], g["delivered"], res["content"][0]["text"].split("\n")[0]))
            assert res["isError"] is False, res["content"][0]["text"]  # the finish completes
            closed = r.call_tool("relay_status")["structuredContent"]["closedGuests"]
            assert closed and closed[0]["guest"] == "demo-1", closed
        with open(manifest, "rb") as f:
            assert f.read() == manifest_bytes  # nothing lost or rewritten
        assert registry_rows(fake.registry_text()) == []
        assert not os.path.exists(fake.lease_file(got["vm"]))
    finally:
        cleanup_guest_root(got)
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
