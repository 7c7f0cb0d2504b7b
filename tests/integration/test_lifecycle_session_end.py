#!/usr/bin/env python3
"""The end of the session with guests held (spec/lifecycle.md §11; spec/mcp.md §16 items 34-37).

Every trigger (stdin closed, a failed write to stdout, SIGTERM, SIGINT, SIGHUP, the parent
process killed) with each MCP_RELAY_ON_EXIT mode, checked at the fault shim over reference-machine: pause sends a
last renewal reaching exactly to the lease's deadline and releases nothing; release destroys
the machine through the verified release path and removes the registry row. Then the grace
period: an operation in flight completes first; a hung one is cancelled at the grace deadline
and recorded as uncertain; a hung release is followed by one direct release; a release that
fails keeps the record and exits 1; a second SIGTERM skips the rest of the grace period.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from lifecycle_support import (Shim, acquire, kill9, registry_rows, response_for, send_call,  # noqa: E402
                               status)

EXIT_S = 60
TRIGGERS = ["stdin-closed", "stdout-failed", "SIGTERM", "SIGINT", "SIGHUP", "parent-exited"]


def trigger_end(r, trigger):
    if trigger == "stdin-closed":
        r.close_stdin()
    elif trigger == "stdout-failed":
        r.proc.stdout.close()
        r.send_raw(b'{"jsonrpc":"2.0","id":99,"method":"ping"}\n')
    else:
        r.signal(getattr(signal, trigger))


def check_pause(fake, got, pid):
    renewals = fake.ops("renew", pid=pid)
    assert renewals, fake.ops()
    last = renewals[-1]
    # A last renewal that carries the lease exactly to its deadline, and no release.
    assert last["timeMs"] + last["ttlMs"] == fake.record("demo-1")["deadlineMs"], last
    assert fake.ops("release") == [], fake.ops("release")
    record = fake.record("demo-1")
    assert record["renewal"]["state"] == "paused", record["renewal"]
    assert record["closed"] is None
    paused = fake.events(got["evidencePath"], "renewal-paused")
    assert len(paused) == 1, paused
    assert len(registry_rows(fake.registry_text())) == 1  # still leased: the row stays


def check_release(fake, got):
    releases = fake.ops("release")
    assert len(releases) == 1, releases
    assert json.loads(releases[0]["arg"])["vm"] == got["vm"]
    assert fake.ended("verify_destroyed")[-1]["result"] == "ok"
    record = fake.record("demo-1")
    assert record["closed"]["reason"] == "released", record["closed"]
    assert registry_rows(fake.registry_text()) == []
    with open(got["evidencePath"] + ".lifecycle.json") as f:
        assert json.load(f)["released"] is True


def end_session(binary, mode, trigger):
    fake = Shim(binary)
    try:
        env = {"MCP_RELAY_ON_EXIT": mode} if mode else {}
        if trigger == "parent-exited":
            got, pid, code = end_by_parent_exit(fake, env)
            stderr = ""
        else:
            with fake.relay(**env) as r:
                r.initialize()
                got = acquire(r, image=fake.image)
                pid = r.proc.pid
                trigger_end(r, trigger)
                code = r.wait(timeout=EXIT_S)
                stderr = r.stderr_text()
                reason = trigger if trigger in ("stdin-closed", "stdout-failed") else "signal-" + trigger
                assert "session ending: %s" % reason in stderr, stderr
        assert code == 0, (mode, trigger, code, stderr)
        if mode == "release":
            check_release(fake, got)
        else:
            check_pause(fake, got, pid)
    finally:
        fake.cleanup()


# -- the parent going away ---------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36


class PipeClient:
    def __init__(self, write_fd, read_fd):
        self.write_fd, self.read_fd, self.buf = write_fd, read_fd, b""

    def send(self, obj):
        os.write(self.write_fd, json.dumps(obj).encode() + b"\n")

    def recv(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.read_fd, 65536)
            assert chunk, "mcp-relay closed stdout"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, rid, name, args):
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": name, "arguments": args}})
        while True:
            msg = self.recv()
            if msg.get("id") == rid:
                return msg["result"]


def end_by_parent_exit(fake, extra_env):
    """Starts the relay under a launcher process that the test then kills; the test process
    is a child subreaper, so the orphaned relay becomes its child and its exit status can be
    read. Returns (acquire result, relay pid, exit status)."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("MCP_RELAY_", "MCP_VM_RELAY_")):
            del env[k]
    env.update({k: v for k, v in fake.env(**extra_env).items() if v is not None})
    env["MCP_RELAY_STATE_DIR"] = fake.state_dir
    env["MCP_RELAY_PROJECT"] = fake.project
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    launcher = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys\n"
         "p = subprocess.Popen([sys.argv[1]], stdin=int(sys.argv[2]), stdout=int(sys.argv[3]),"
         " stderr=subprocess.DEVNULL, pass_fds=(int(sys.argv[2]), int(sys.argv[3])))\n"
         "print(p.pid, flush=True)\n"
         "sys.stdin.readline()\n", fake.binary, str(in_r), str(out_w)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, pass_fds=(in_r, out_w), cwd=fake.project)
    pid = int(launcher.stdout.readline())
    os.close(in_r)
    os.close(out_w)
    client = PipeClient(in_w, out_r)
    try:
        client.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "t", "version": "1"}}})
        client.recv()
        res = client.call(2, "relay_acquire", {"task": "demo", "image": fake.image, "extractions": []})
        assert res["isError"] is False, res
        launcher.kill()  # the parent goes away; stdin stays open
        launcher.wait()
        deadline = time.monotonic() + EXIT_S
        while True:
            done, status_word = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() < deadline, "mcp-relay kept running after its parent exited"
            time.sleep(0.05)
        return res["structuredContent"], pid, os.waitstatus_to_exitcode(status_word)
    finally:
        os.close(in_w)
        os.close(out_r)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- every trigger with each mode ------------------------------------------------------------

def test_every_trigger_pauses_by_default(binary):
    # Items 34 and 36 (pause, the default, with MCP_RELAY_ON_EXIT unset).
    for trigger in TRIGGERS:
        end_session(binary, None, trigger)


def test_every_trigger_with_explicit_pause(binary):
    for trigger in TRIGGERS:
        end_session(binary, "pause", trigger)


def test_every_trigger_releases_with_release(binary):
    # Item 35 and the same for every other trigger (37: stdout failure).
    for trigger in TRIGGERS:
        end_session(binary, "release", trigger)


# -- the grace period -------------------------------------------------------------------------

def test_grace_period_cancels_a_hung_acquisition_and_records_it_uncertain(binary):
    fake = Shim(binary)
    try:
        # The lease request hangs at the backend (it never answers by itself).
        fake.script([{"op": "acquire", "fault": "delay", "delayMs": 3600000, "times": 1}])
        with fake.relay(MCP_RELAY_SHUTDOWN_GRACE_MS=300) as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", {"task": "demo", "image": fake.image, "extractions": []})
            fake.wait_ops("acquire", 1)
            r.close_stdin()
            assert r.wait(timeout=EXIT_S) == 0
            stderr = r.stderr_text()
            lines = r.read_until_eof()
        assert "an operation was still running" in stderr and "cancelling it" in stderr, stderr
        # The cancelled call gets no response.
        assert not any(json.loads(line).get("id") == rid for line in lines if line.strip()), lines
        assert [o["result"] for o in fake.ended("acquire")] == ["cancelled"], fake.ops()
        record = fake.record("demo-1")
        assert record["phase"] == "acquisition-uncertain", record["phase"]
        assert record["acquisitionInFlight"] is True
        cancelled = fake.events(record["evidencePath"], "operation-cancelled")
        assert cancelled and cancelled[0]["details"]["uncertain"] is True, cancelled
        # Kept in pause mode: the registry row stays until the outcome is settled.
        assert len(registry_rows(fake.registry_text())) == 1
        # A restart settles it by purpose, never by acquiring again.
        with fake.relay() as r:
            r.initialize()
            s = status(r)
            for _ in range(200):
                if s["guests"][0]["phase"] != "reconciling":
                    break
                time.sleep(0.05)
                s = status(r)
            assert s["guests"][0]["phase"] == "acquisition-uncertain", s["guests"][0]
            res = r.call_tool("relay_release", {"guest": "demo-1"})
            assert res["isError"] is False, res
            assert res["structuredContent"]["reason"] == "not-acquired", res["structuredContent"]
            assert len(fake.ops("acquire")) == 1  # never sent again
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_release_mode_lets_the_operation_in_flight_complete_first(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "delay", "delayMs": 1500, "times": 1}])
        with fake.relay(MCP_RELAY_ON_EXIT="release", MCP_RELAY_SHUTDOWN_GRACE_MS=30000) as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", {"task": "demo", "image": fake.image, "extractions": []})
            fake.wait_ops("acquire", 1)
            r.close_stdin()
            resp = response_for(r, rid, timeout=EXIT_S)
            assert resp["result"]["isError"] is False, resp  # answered while stdout works
            assert r.wait(timeout=EXIT_S) == 0
            assert "cancelling" not in r.stderr_text()
        ops = [(o["op"], o.get("result")) for o in fake.ops(("acquire:end", "release"))]
        assert ops == [("acquire:end", "ok"), ("release", None)], ops
        assert fake.record("demo-1")["closed"]["reason"] == "released"
    finally:
        fake.cleanup()


def test_hung_release_is_cancelled_then_released_directly(binary):
    fake = Shim(binary)
    try:
        with fake.relay(MCP_RELAY_ON_EXIT="release", MCP_RELAY_SHUTDOWN_GRACE_MS=500) as r:
            r.initialize()
            acquire(r, image=fake.image)
            # The first destroy request hangs; the direct one after the grace succeeds.
            fake.script([{"op": "release", "fault": "delay", "delayMs": 3600000, "times": 1}])
            r.close_stdin()
            assert r.wait(timeout=EXIT_S) == 0, r.stderr_text()
            stderr = r.stderr_text()
        assert "cancelling it" in stderr, stderr
        releases = fake.ops("release")
        assert len(releases) == 2, releases
        assert [o["result"] for o in fake.ended("release")] == ["cancelled", "ok"], fake.ops()
        assert fake.record("demo-1")["closed"]["reason"] == "released"
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_failed_release_keeps_the_record_and_exits_1(binary):
    fake = Shim(binary)
    try:
        with fake.relay(MCP_RELAY_ON_EXIT="release") as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            fake.script([{"op": "release", "fault": "fail", "code": "unavailable",
                          "reason": "backend refuses teardown", "times": -1}])
            r.close_stdin()
            assert r.wait(timeout=EXIT_S) == 1
            stderr = r.stderr_text()
        assert "could not release demo-1" in stderr, stderr
        # Three attempts through the normal path, then one direct attempt.
        assert len(fake.ops("release")) == 4, fake.ops("release")
        record = fake.record("demo-1")
        assert record["closed"] is None
        assert record["phase"] == "releasing"
        assert record["renewal"]["state"] == "stopped"
        assert len(registry_rows(fake.registry_text())) == 1
        assert fake.events(got["evidencePath"], "release-failed")
        # The machine is still there at the backend, owned by the kept record.
        assert os.path.exists(fake.lease_file(got["vm"]))
    finally:
        fake.cleanup()


def test_second_sigterm_skips_the_rest_of_the_grace_period(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "delay", "delayMs": 3600000, "times": 1}])
        # A grace period longer than this test's patience: only the second signal ends it.
        with fake.relay(MCP_RELAY_SHUTDOWN_GRACE_MS=3600000) as r:
            r.initialize()
            send_call(r, "relay_acquire", {"task": "demo", "image": fake.image, "extractions": []})
            fake.wait_ops("acquire", 1)
            r.signal(signal.SIGTERM)
            time.sleep(0.3)
            assert r.proc.poll() is None  # still in its grace period
            r.signal(signal.SIGTERM)
            assert r.wait(timeout=EXIT_S) == 0
            assert "cancelling it" in r.stderr_text()
    finally:
        fake.cleanup()


def test_capacity_wait_stops_at_the_end_of_the_session(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "acquire", "fault": "fail", "code": "at capacity", "reason": "limit reached",
                          "times": -1}])
        with fake.relay() as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", {"task": "demo", "image": fake.image, "extractions": []})
            fake.wait_ops("acquire", 1)
            r.close_stdin()
            resp = response_for(r, rid, timeout=EXIT_S)
            assert resp["result"]["structuredContent"]["error"]["code"] == "shutting-down", resp
            assert r.wait(timeout=EXIT_S) == 0
        assert len(fake.ops("acquire")) == 1
        assert fake.record("demo-1")["closed"]["reason"] == "not-acquired"
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_calls_queued_behind_a_running_one_are_refused(binary):
    fake = Shim(binary)
    try:
        fake.script([{"op": "release", "fault": "delay", "delayMs": 1500, "times": 1}])
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            first = send_call(r, "relay_release", {"guest": "demo-1"})
            fake.wait_ops("release", 1)
            second = send_call(r, "relay_release", {"guest": "demo-1"})
            time.sleep(0.2)
            r.close_stdin()
            queued = response_for(r, second, timeout=EXIT_S)
            assert queued["result"]["structuredContent"]["error"]["code"] == "shutting-down", queued
            done = response_for(r, first, timeout=EXIT_S)
            assert done["result"]["isError"] is False, done
            assert r.wait(timeout=EXIT_S) == 0
        assert len(fake.ops("release")) == 1
    finally:
        fake.cleanup()


def test_failed_final_renewal_pauses_anyway_and_exits_1(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            fake.script([{"op": "renew", "fault": "fail", "code": "unavailable", "reason": "service gone",
                          "times": -1}])
            r.close_stdin()
            assert r.wait(timeout=EXIT_S) == 1
            assert "the final renewal of demo-1 failed: service gone" in r.stderr_text()
        record = fake.record("demo-1")
        assert record["renewal"]["state"] == "paused", record["renewal"]
        assert fake.events(got["evidencePath"], "final-renewal-failed")
        assert fake.events(got["evidencePath"], "renewal-paused")
        assert fake.ops("release") == []
    finally:
        fake.cleanup()


def test_sigkill_leaves_the_lease_to_the_backend(binary):
    # SIGKILL cannot be handled: nothing is paused or released; the window is the safety net.
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            kill9(r)
        assert fake.ops("release") == []
        assert len(fake.ops("renew")) == 0
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
