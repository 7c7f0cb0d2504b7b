#!/usr/bin/env python3
"""Restart and reconciliation (spec/lifecycle.md §8, §9; spec/tools.md §3.4, §3.10).

A relay is killed with SIGKILL at different points (after acquire, during a slow acquire,
during a capacity wait, during a release) and a new one is started with the same
MCP_RELAY_SESSION: its guests come back by name, nothing is sent twice (the fake backend's
log is counted per process: the fault shim over reference-machine), and the guest can then be released with nothing lost. A lease
restored under a different environment is refused before any backend operation; a record
this relay cannot read is left untouched; the state of a relay from before several guests
is migrated into one guest named from its task; a session still locked by another process
waits for it.

SIGKILL after stage, during a script and during finish: test_lifecycle_restart_runs.py.
"""
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from lifecycle_support import (Shim, acquire, guest_entry, kill9, registry_rows,  # noqa: E402
                               response_for, send_call, status, wait_status)

ARGS = {"task": "demo", "extractions": [{"name": "out", "path": "out"}]}


def args(fake):
    """ARGS with the image the wrapped plugin offers."""
    return dict(ARGS, image=fake.image)


def settled(name, phase):
    def check(s):
        for g in s["guests"]:
            if g["guest"] == name:
                return g["phase"] == phase
        return False
    return check


def wait_for(predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "waited in vain for " + what
        time.sleep(0.02)


def release_ok(r, name):
    res = r.call_tool("relay_release", {"guest": name})
    assert res["isError"] is False, res["content"][0]["text"]
    return res["structuredContent"]


def test_sigkill_after_acquire_then_restart(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, **args(fake))
            kill9(r)
        record = fake.record("demo-1")
        assert record["phase"] == "ready" and record["lease"]["vm"] == got["vm"]
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            s = wait_status(r, settled("demo-1", "ready"), what="demo-1 taken back")
            g = guest_entry(r, "demo-1")
            assert g["vm"] == got["vm"] and g["purpose"] == got["purpose"], g
            assert g["declarations"] == ARGS["extractions"], g
            assert g["evidencePath"] == got["evidencePath"]
            assert s["active"] is True
            assert fake.ops("acquire", pid=pid) == []  # nothing acquired again
            assert fake.ops("inspect", pid=pid), fake.ops()
            # Renewal resumed at once, in the usual window.
            renew = fake.wait_ops("renew", 1, pid=pid)[0]
            assert renew["ttlMs"] == 15 * 60 * 1000, renew
            # The name counter continues.
            assert acquire(r, image=fake.image)["guest"] == "demo-2"
            done = release_ok(r, "demo-1")
            assert done["destructionVerified"] is True
            release_ok(r, "demo-2")
        assert registry_rows(fake.registry_text()) == []
        assert len(fake.ops("acquire")) == 2
    finally:
        fake.cleanup()


def test_status_shows_reconciling_and_calls_wait_for_it(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            kill9(r)
        fake.script([{"op": "inspect", "fault": "delay", "delayMs": 1500, "times": 1}])
        with fake.relay() as r:
            r.initialize()
            g = guest_entry(r, "demo-1")
            assert g is not None and g["phase"] == "reconciling", g
            # A call on the guest waits for its reconciliation, then runs.
            rid = send_call(r, "relay_release", {"guest": "demo-1"})
            resp = response_for(r, rid, timeout=30)
            assert resp["result"]["isError"] is False, resp
            ops = [o["op"] for o in fake.ops(("inspect", "release"), pid=r.proc.pid)]
            assert ops == ["inspect", "release"], ops
    finally:
        fake.cleanup()


def test_sigkill_during_a_slow_acquire_whose_lease_exists(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "hang", "delayMs": 3600000, "times": 1}])
        with fake.relay() as r:
            r.initialize()
            send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            wait_for(lambda: fake.leased_vms(), "the backend to hold the lease")  # the hang's effect
            kill9(r)
        assert fake.record("demo-1")["acquisitionInFlight"] is True
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            wait_status(r, settled("demo-1", "ready"), what="the lease adopted by its purpose")
            assert fake.ops("acquire", pid=pid) == []
            assert len(fake.ops("find_by_purpose", pid=pid)) == 1
            assert fake.record("demo-1")["acquisitionInFlight"] is False
            release_ok(r, "demo-1")
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_sigkill_during_a_slow_acquire_that_leased_nothing(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "delay", "delayMs": 3600000, "times": 1}])
        with fake.relay() as r:
            r.initialize()
            send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            kill9(r)
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            s = wait_status(r, settled("demo-1", "acquisition-uncertain"), what="an uncertain acquisition")
            g = guest_entry(r, "demo-1")
            assert "never acquire again blindly" in g["lastError"], g
            assert len(registry_rows(fake.registry_text())) == 1  # kept until settled
            done = release_ok(r, "demo-1")
            assert done["reason"] == "not-acquired", done
            assert fake.ops("acquire", pid=pid) == []
            assert fake.ops("release", pid=pid) == []  # nothing to destroy
            assert s["guests"][0]["guest"] == "demo-1"
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_sigkill_during_a_capacity_wait(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "fail", "code": "at capacity", "reason": "limit reached",
                      "times": -1}])
        with fake.relay() as r:
            r.initialize()
            send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            wait_status(r, settled("demo-1", "waiting-for-capacity"), what="waiting")
            kill9(r)
        assert fake.record("demo-1")["phase"] == "waiting-for-capacity"
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            wait_status(r, settled("demo-1", "acquisition-uncertain"), what="an uncertain acquisition")
            fake.advance(60_000)
            time.sleep(0.3)
            assert fake.ops("acquire", pid=pid) == []  # the wait is not resumed
            assert release_ok(r, "demo-1")["reason"] == "not-acquired"
        assert len(fake.ops("acquire")) == 1
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_sigkill_during_a_release_before_destruction(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            fake.script([{"op": "release", "fault": "delay", "delayMs": 3600000, "times": 1}])
            send_call(r, "relay_release", {"guest": "demo-1"})
            fake.wait_ops("release", 1)
            kill9(r)
        record = fake.record("demo-1")
        assert record["phase"] == "releasing" and record["renewal"]["state"] == "stopped", record
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            wait_status(r, settled("demo-1", "releasing"), what="the release awaiting another try")
            g = guest_entry(r, "demo-1")
            assert g["renewal"]["state"] == "stopped" and g["active"] is False, g
            fake.advance(120_000)
            time.sleep(0.3)
            # Not released (nor renewed) by the restart itself: only by an explicit call.
            assert fake.ops(("release", "renew"), pid=pid) == []
            done = release_ok(r, "demo-1")
            assert done["destructionVerified"] is True
            assert len(fake.ops("release", pid=pid)) == 1
        assert not os.path.exists(fake.lease_file(got["vm"]))
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_sigkill_during_a_release_after_destruction(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            fake.script([{"op": "release", "fault": "hang", "delayMs": 3600000, "times": 1}])
            send_call(r, "relay_release", {"guest": "demo-1"})
            fake.wait_ops("release", 1)
            wait_for(lambda: not fake.leased_vms() and not os.path.exists(os.path.dirname(fake.lease_file(got["vm"]))),
                     "the backend to destroy the guest")  # the hang's effect, before its answer
            kill9(r)
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            s = wait_status(r, lambda s: s["closedGuests"], what="the guest closed")
            assert s["closedGuests"][0]["reason"] == "absent", s
            assert fake.ops("release", pid=r.proc.pid) == []
        with open(got["evidencePath"] + ".lifecycle.json") as f:
            assert "destruction verified" in json.load(f)["reason"]
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_a_lease_of_another_environment_is_never_operated_on(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            kill9(r)
        before = open(os.path.join(fake.session_dir, "guests", "demo-1", "lease.json"), "rb").read()
        fake.script([], binding={"machine": "reference-machine", "endpoint": None, "store": "/srv/another-store",
                                 "environmentFingerprint": None})
        with fake.relay() as r:
            r.initialize()
            pid = r.proc.pid
            wait_status(r, settled("demo-1", "unavailable"), what="an unavailable guest")
            g = guest_entry(r, "demo-1")
            assert "environment-mismatch" in g["lastError"], g
            # No backend operation on it at all.
            assert [o["op"] for o in fake.ops(pid=pid)] == ["init"], fake.ops(pid=pid)
            res = r.call_tool("relay_release", {"guest": "demo-1"})
            assert res["structuredContent"]["error"]["code"] == "guest-unavailable", res
            assert [o["op"] for o in fake.ops(pid=pid)] == ["init"]
            # It still counts against the limit.
            assert status(r)["guests"][0]["guest"] == "demo-1"
        after = open(os.path.join(fake.session_dir, "guests", "demo-1", "lease.json"), "rb").read()
        assert before == after  # the record is left untouched
        # With its own environment it is taken back.
        fake.script([])
        with fake.relay() as r:
            r.initialize()
            wait_status(r, settled("demo-1", "ready"), what="taken back")
            release_ok(r, "demo-1")
    finally:
        fake.cleanup()


def test_an_unreadable_record_is_left_untouched(binary):
    fake = Shim(binary)
    try:
        folder = os.path.join(fake.session_dir, "guests", "odd-1")
        os.makedirs(folder, mode=0o700)
        path = os.path.join(folder, "lease.json")
        with open(path, "w") as f:
            f.write('{"schemaVersion": 7, "written": "by a future relay"}\n')
        with fake.relay() as r:
            r.initialize()
            wait_status(r, settled("odd-1", "unavailable"), what="unavailable")
            g = guest_entry(r, "odd-1")
            assert path in g["lastError"], g
            res = r.call_tool("relay_release", {"guest": "odd-1"})
            assert res["structuredContent"]["error"]["code"] == "guest-unavailable"
        with open(path) as f:
            assert f.read() == '{"schemaVersion": 7, "written": "by a future relay"}\n'
    finally:
        fake.cleanup()


def test_a_session_held_by_another_process_waits_for_it(binary):
    fake = Shim(binary)
    try:
        first = fake.relay()
        first.initialize()
        acquire(first, image=fake.image)
        second = fake.relay()
        try:
            second.initialize()
            g = guest_entry(second, "demo-1")
            assert g["phase"] == "reconciling", g
            refused = second.call_tool("relay_acquire", args(fake))["structuredContent"]
            assert refused["error"]["code"] == "session-locked", refused
            assert str(first.proc.pid) in refused["error"]["message"], refused
            first.close_stdin()
            assert first.wait(timeout=30) == 0
            wait_status(second, settled("demo-1", "ready"), what="taken over after the first exited")
            assert fake.ops("acquire", pid=second.proc.pid) == []
            release_ok(second, "demo-1")
        finally:
            second.close()
            first.close()
    finally:
        fake.cleanup()


def test_a_session_lock_that_never_comes_makes_guests_unavailable(binary):
    fake = Shim(binary)
    try:
        first = fake.relay()
        first.initialize()
        acquire(first, image=fake.image)
        # The wait lasts MCP_RELAY_SHUTDOWN_GRACE_MS + 10 s.
        second = fake.relay(MCP_RELAY_SHUTDOWN_GRACE_MS=0)
        try:
            second.initialize()
            wait_status(second, settled("demo-1", "unavailable"), timeout=40, what="unavailable")
            g = guest_entry(second, "demo-1")
            assert "pid %d" % first.proc.pid in g["lastError"], g
            assert fake.ops(pid=second.proc.pid)[-1]["op"] == "init"
        finally:
            second.close()
            first.close()
    finally:
        fake.cleanup()


def test_single_guest_state_is_migrated_to_one_guest(binary):
    fake = Shim(binary)
    try:
        # The older relay's record, bound to a machine service the fake stands in for.
        binding = {"machine": "machine-service", "endpoint": "http://localhost:6240",
                   "store": "/srv/tart", "environmentFingerprint": None}
        fake.script([], binding=binding)
        purpose = "relay-legacy-0badcafe"
        vm = "pilot-" + purpose + "-a1b2c3"
        now = fake.now_ms
        lease = {"vm": vm, "purpose": purpose, "image": "ubuntu2404", "lease_id": "1" * 32,
                 "state": "running", "ttl_expires_at": now / 1000 + 600, "created_at": now / 1000}
        row = {"machine": "127.0.0.1 (machine-service %s)" % purpose, "os": "ubuntu2404",
               "taskName": purpose, "agent": "mcp-relay s1", "project": fake.project,
               "startDate": "2026-01-01-00-00-00-Z"}
        started = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now / 1000))
        old = {"backend": {"endpoint": "http://localhost:6240", "tartHome": "/srv/tart"},
               "purpose": purpose, "task": "legacy", "image": "ubuntu2404", "project": fake.project,
               "startedAt": started, "guestRoot": "/var/tmp/x-mcp-relay-" + purpose,
               "hostRoot": os.path.join(fake.project, "relay-evidence", purpose), "ttlHours": 4,
               "extractions": [], "fullWorkspace": False, "lease": lease, "row": row,
               "staged": False, "active": True, "guestState": "running"}
        os.makedirs(fake.session_dir, mode=0o700)
        with open(os.path.join(fake.session_dir, "lease.json"), "w") as f:
            json.dump(old, f)
        open(os.path.join(fake.session_dir, "owner.lock"), "w").close()
        # The backend knows that lease (reference-machine's record of it).
        folder = os.path.dirname(fake.lease_file(vm))
        os.makedirs(os.path.join(folder, "home"), mode=0o700)
        stored = {"vm": vm, "purpose": purpose, "image": "ubuntu2404", "lease_id": "1" * 32,
                  "state": "running", "expiresAtMs": now + 600000, "console": None, "display": None,
                  "ssh": None, "record": {"folder": folder}}
        with open(fake.lease_file(vm), "w") as f:
            json.dump(stored, f)
        with fake.relay() as r:
            r.initialize()
            wait_status(r, settled("legacy-1", "ready"), what="the migrated guest taken back")
            g = guest_entry(r, "legacy-1")
            assert g["vm"] == vm and g["purpose"] == purpose, g
            names = os.listdir(fake.session_dir)
            assert "lease.json" not in names, names
            assert any(n.startswith("lease.json.migrated-") for n in names), names
            assert os.path.exists(os.path.join(fake.session_dir, "guests", "legacy-1", "lease.json"))
            with open(os.path.join(fake.session_dir, "session.json")) as f:
                assert json.load(f)["counters"]["legacy"] == 2
            assert acquire(r, task="legacy", image=fake.image)["guest"] == "legacy-2"
            assert fake.ops("acquire", pid=r.proc.pid) and len(fake.ops("acquire")) == 1
    finally:
        fake.cleanup()


def test_session_key_is_the_documented_derivation(binary):
    fake = Shim(binary, session="my-session@host")
    try:
        with fake.relay() as r:
            r.initialize()
            s = status(r)
            key = hashlib.sha256(b"my-session@host").hexdigest()[:32]
            assert s["stateDirectory"].endswith("/" + key), s["stateDirectory"]
            assert s["sessionId"] == "my-session@host"
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
