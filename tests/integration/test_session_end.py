#!/usr/bin/env python3
"""The end of the session at the protocol level, with no guest held (spec/mcp.md §13;
spec/lifecycle.md §11; conformance checklist items 33, 36, 37).

No timing is asserted (speed belongs in bench/): a generous timeout only tells a hang from an
exit, and the measured time is printed.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402

HANG_S = 20


def test_stdin_closed_exits_zero(binary):
    # Item 33.
    with Relay(binary) as r:
        r.initialize()
        assert r.call_tool("relay_status")["isError"] is False
        t0 = time.monotonic()
        r.close_stdin()
        assert r.wait(timeout=HANG_S) == 0
        print("  exit %.1f ms after stdin closed" % ((time.monotonic() - t0) * 1000))
        assert r.read_until_eof() == []
        assert "session ending: stdin-closed" in r.stderr_text()


def test_stdin_closed_before_any_request(binary):
    with Relay(binary) as r:
        r.close_stdin()
        assert r.wait(timeout=HANG_S) == 0
        assert r.read_until_eof() == []


def test_signals_end_the_session(binary):
    # Item 36: SIGTERM, SIGINT and SIGHUP each end the session like end of file.
    for signo, name in [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT"), (signal.SIGHUP, "SIGHUP")]:
        with Relay(binary) as r:
            r.initialize()
            r.signal(signo)
            status = r.wait(timeout=HANG_S)
            assert status == 0, (name, status)
            assert "session ending: signal-%s" % name in r.stderr_text(), r.stderr_text()
            # Nothing but whole JSON-RPC lines on stdout.
            assert r.read_until_eof() == []


def test_stdout_closed_ends_the_session(binary):
    # Item 37: close the read end of stdout, then send a request.
    with Relay(binary) as r:
        r.initialize()
        r.proc.stdout.close()
        r.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        status = r.wait(timeout=HANG_S)
        assert status == 0, status
        assert "session ending: stdout-failed" in r.stderr_text(), r.stderr_text()


def test_parent_exit_ends_the_session(binary):
    # spec/lifecycle.md §11.1: the parent going away ends the session, while stdin stays open.
    with Relay(binary) as holder:  # only for its private folders and environment
        parent_exit_check(binary, holder.env)


def parent_exit_check(binary, env):
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    # The launcher starts mcp-relay with our pipes, then waits for a line on its own stdin
    # before it exits: the relay must be serving (its parent known) before the parent goes.
    launcher = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys\n"
         "p = subprocess.Popen([sys.argv[1]], stdin=int(sys.argv[2]), stdout=int(sys.argv[3]),"
         " stderr=subprocess.DEVNULL, pass_fds=(int(sys.argv[2]), int(sys.argv[3])))\n"
         "print(p.pid, flush=True)\n"
         "sys.stdin.readline()\n"
         "os._exit(0)\n", binary, str(read_fd), str(out_w)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, pass_fds=(read_fd, out_w), cwd="/")
    pid = int(launcher.stdout.readline())
    os.close(read_fd)
    os.close(out_w)
    try:
        os.write(write_fd, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        out = b""
        while not out.endswith(b"\n"):
            chunk = os.read(out_r, 65536)
            assert chunk, "mcp-relay closed stdout before answering"
            out += chunk
        assert out == b'{"jsonrpc":"2.0","id":1,"result":{}}\n', out
        launcher.stdin.write(b"go\n")
        launcher.stdin.flush()
        launcher.wait()
        deadline = time.monotonic() + HANG_S
        alive = True
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().split(") ")[1].startswith("Z"):
                        alive = False
                        break
            except (ProcessLookupError, FileNotFoundError):
                alive = False
                break
            time.sleep(0.05)
        assert not alive, "mcp-relay kept running after its parent exited"
        # stdin is still open: the session ended because the parent went away.
        assert os.read(out_r, 65536) == b""
    finally:
        os.close(write_fd)
        os.close(out_r)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_requests_after_signal_with_open_subscription(binary):
    # The subscription is answered when the session ends on a signal.
    with Relay(binary) as r:
        r.send({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                "params": {"_meta": Relay.modern_meta()}})
        assert r.recv()["method"] == "notifications/subscriptions/acknowledged"
        r.signal(signal.SIGTERM)
        final = r.recv(timeout=HANG_S)
        assert final["id"] == 1 and final["result"]["resultType"] == "complete", final
        assert r.wait(timeout=HANG_S) == 0


if __name__ == "__main__":
    run_tests(globals())
