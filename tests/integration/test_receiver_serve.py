#!/usr/bin/env python3
"""The resident receiver (spec/guest.md §17 item 2), driven directly against the static receiver the
build made: `receiver serve --root R` takes requests framed as `run --stdin` takes one, one after
another on one standard input, and answers each framed as `run --stdin` answers, in order; the
replay rule holds across the stream; a request whose part fails its hash is refused and the next
one runs; no lock is held between runs; killing serve kills no survivor of a run; it exits at end
of input, when R is gone, and after its idle limit; a worker that crashes is answered for
(`workerExit`) and serve goes on; at most 6 fsync-family calls per run."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Skip, run_tests  # noqa: E402
from test_receiver_stdin import Guest  # noqa: E402


class Serve:
    """One `receiver serve` with its standard streams."""

    def __init__(self, g, env=None, wrap=None):
        self.g = g
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen((wrap or []) + [g.bin, "serve", "--root", g.root], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)

    def read_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.p.stdout.read(n - len(data))
            assert chunk, "serve closed its output inside an answer"
            data += chunk
        return data

    def answer(self):
        line = self.p.stdout.readline()
        assert line.endswith(b"\n"), "no answer: %r; stderr %r" % (line, self.stderr_now())
        frame = json.loads(line)
        parts = {}
        for part in frame.get("parts", []):
            parts[part["name"]] = (part, self.read_exact(part["bytes"]))
        return frame, parts

    def send(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def ask(self, data):
        self.send(data)
        return self.answer()

    def stderr_now(self):
        return ""

    def close(self, timeout=10):
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        rc = self.p.wait(timeout=timeout)
        err = self.p.stderr.read().decode(errors="replace")
        return rc, err


def receipt_of(parts):
    return json.loads(parts["receipt"][1])


def test_many_requests_in_order_on_one_stream(binary):
    g = Guest(binary)
    try:
        s = Serve(g)
        pid = s.p.pid
        for i in range(20):
            frame, parts = s.ask(g.request("run-s%02d" % i, "echo n%02d\necho %d >> count\n" % (i, i)))
            assert frame["executionId"] == "run-s%02d" % i and frame["duplicate"] is False, frame
            r = receipt_of(parts)
            assert r["outcome"]["kind"] == "completed" and r["stdout"] == "n%02d\n" % i, r
            with open(g.path("state/receiver/receipts/run-s%02d.json" % i), "rb") as f:
                assert f.read() == parts["receipt"][1]
            # no lock between runs: the lock folder holds no owner once the answer is out
            assert not os.path.exists(g.path(".receiver-lock/owner.json")), "a lock held between runs"
        # two requests sent together are answered in order
        s.send(g.request("run-t1", "echo one\n") + g.request("run-t2", "echo two\n"))
        f1, p1 = s.answer()
        f2, p2 = s.answer()
        assert (f1["executionId"], f2["executionId"]) == ("run-t1", "run-t2"), (f1, f2)
        assert receipt_of(p2)["stdout"] == "two\n"
        # the replay rule holds on the stream: the same id answers its receipt, nothing runs
        frame, parts = s.ask(g.request("run-s03", "echo n03\necho 3 >> count\n"))
        assert frame["duplicate"] is True and frame["requestMatches"] is True, frame
        with open(g.path("workspace/count")) as f:
            assert f.read().split() == [str(i) for i in range(20)], "a run ran twice or not at all"
        # one serve process all along, and it ends at end of input
        assert s.p.pid == pid and s.p.poll() is None
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()


def test_refused_request_then_the_next_runs(binary):
    g = Guest(binary)
    try:
        s = Serve(g)
        good = g.request("run-b", "echo ran > ran\n")
        header, rest = good.split(b"\n", 1)
        frame, parts = s.ask(header + b"\n" + rest[:-2] + b"X\n")
        assert frame["receipt"] is None and frame["outcome"]["kind"] == "refused", frame
        assert "sha256" in frame["outcome"]["diagnostic"], frame
        assert not os.path.exists(g.path("workspace/ran"))
        frame, parts = s.ask(good)
        assert receipt_of(parts)["outcome"]["kind"] == "completed", frame
        assert os.path.exists(g.path("workspace/ran"))
        # a header that is no header leaves the stream out of step: refused, then serve ends (2)
        frame, parts = s.ask(b"not json\n")
        assert frame["outcome"]["kind"] == "refused", frame
        rc, err = s.close()
        assert rc == 2, (rc, err)
    finally:
        g.close()


def diagnostic(exec_id, script, limit_ms=10000, sha=None, argv=None):
    import hashlib
    body = script.encode()
    header = {"protocol": 1, "diagnostic": {"executionId": exec_id, "argv": argv or ["/bin/sh", "-c"],
                                            "limitMs": limit_ms},
              "parts": [{"name": "script", "bytes": len(body), "sha256": sha or hashlib.sha256(body).hexdigest()}]}
    return json.dumps(header).encode() + b"\n" + body


def test_diagnostics_on_the_stream(binary):
    """spec/guest.md §17 item 3 over §13: serve runs a diagnostic itself (merged output with its exit
    status, no journal line, no lock, no record), kills its group at the limit, refuses a script
    that fails its hash and goes on, and runs the next recorded request as before."""
    import hashlib
    g = Guest(binary)
    try:
        s = Serve(g)
        s.ask(g.request("run-d0", "echo first\n"))
        journal = open(g.path("state/journal/events.jsonl"), "rb").read()
        frame, parts = s.ask(diagnostic("diagnostic-1", "echo out; echo err >&2; exit 4"))
        ex = frame["diagnosticExit"]
        assert frame["executionId"] == "diagnostic-1" and ex["code"] == 4 and ex["signal"] is None, frame
        assert ex["timedOut"] is False and ex["outputTruncated"] is False, frame
        out = parts["output"][1]
        assert out == b"out\nerr\n" and parts["output"][0]["sha256"] == hashlib.sha256(out).hexdigest(), out
        frame, parts = s.ask(diagnostic("diagnostic-2", "head -c 70000 /dev/zero | tr '\\0' y; echo Z"))
        assert frame["diagnosticExit"]["outputTruncated"] is True, frame
        assert len(parts["output"][1]) == 64000 and parts["output"][1].endswith(b"yZ\n")
        t = time.monotonic()
        frame, parts = s.ask(diagnostic("diagnostic-3", "sleep 41 & echo started; sleep 42", limit_ms=800))
        ex = frame["diagnosticExit"]
        assert ex["timedOut"] is True and ex["code"] is None and time.monotonic() - t < 5, frame
        assert parts["output"][1] == b"started\n", parts
        left = subprocess.run(["pgrep", "-f", "^sleep 4[12]$"], stdout=subprocess.PIPE).stdout.split()
        assert left == [], left
        frame, parts = s.ask(diagnostic("diagnostic-4", "touch hashed", sha="0" * 64))
        assert frame["outcome"]["kind"] == "refused" and "sha256" in frame["outcome"]["diagnostic"], frame
        assert not os.path.exists(g.path("workspace/hashed"))
        assert open(g.path("state/journal/events.jsonl"), "rb").read() == journal, "a diagnostic wrote the journal"
        assert not os.path.exists(g.path(".receiver-lock/owner.json"))
        frame, parts = s.ask(g.request("run-d1", "echo after\n"))
        assert receipt_of(parts)["stdout"] == "after\n", frame
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()


def test_killing_serve_kills_no_survivor(binary):
    g = Guest(binary)
    try:
        s = Serve(g)
        frame, parts = s.ask(g.request("run-bg", "sleep 300 &\necho $! > bg.pid\n"))
        r = receipt_of(parts)
        assert r["leftRunning"]["count"] >= 1, r
        with open(g.path("workspace/bg.pid")) as f:
            bg = int(f.read())
        # the survivor is not a child of serve (nor in its process group)
        with open("/proc/%d/stat" % bg) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        assert int(fields[1]) != s.p.pid and int(fields[2]) != os.getpgid(s.p.pid), fields[:4]
        s.p.kill()
        s.p.wait()
        time.sleep(0.3)
        os.kill(bg, 0)  # still alive
        os.kill(bg, signal.SIGKILL)
    finally:
        g.close()


def test_a_worker_that_crashes_is_answered_for_and_serve_goes_on(binary):
    if os.environ.get("RELAY_FAILPOINTS", "").upper() not in ("ON", "1", "TRUE", "YES"):
        raise Skip("needs a failpoint build (RELAY_FAILPOINTS=ON)")
    g = Guest(binary)
    try:
        s = Serve(g, env={"MCP_RELAY_FAILPOINTS": "receiver.run.after-started=crash"})
        frame, parts = s.ask(g.request("run-c1", "echo x >> count\n"))
        assert frame["executionId"] == "run-c1" and frame["receipt"] is None, frame
        assert frame["workerExit"] == {"code": 86, "signal": None}, frame
        assert "failpoint receiver.run.after-started: crash" in frame["stderr"], frame
        assert parts == {}
        assert s.p.poll() is None, "serve ended with its worker"
        frame, parts = s.ask(g.request("run-c2", "echo y >> count\n"))
        assert frame["executionId"] == "run-c2" and frame["workerExit"]["code"] == 86, frame
        assert not os.path.exists(g.path("workspace/count")), "a crashed run ran its script"
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()


def test_serve_ends_idle_and_when_the_root_is_gone(binary):
    g = Guest(binary)
    try:
        s = Serve(g, env={"RELAY_RECEIVER_SERVE_IDLE_MS": "300"})
        t0 = time.monotonic()
        rc = s.p.wait(timeout=10)
        assert rc == 0 and time.monotonic() - t0 < 5, rc
        assert b"no request for 300 ms" in s.p.stderr.read()
    finally:
        g.close()
    g = Guest(binary)
    s = Serve(g)
    frame, parts = s.ask(g.request("run-r", "true\n"))
    shutil.rmtree(g.root)
    rc = s.p.wait(timeout=20)  # the root is looked at every 5 s while idle
    assert rc == 0, rc
    assert b"guest root is gone" in s.p.stderr.read()


def test_at_most_six_fsyncs_per_run_on_the_stream(binary):
    if shutil.which("strace") is None:
        raise Skip("strace is not installed")
    g = Guest(binary)
    try:
        out = os.path.join(g.root, "..", os.path.basename(g.root) + ".strace")
        s = Serve(g, wrap=["strace", "-f", "-qq", "-c", "-U", "name,calls",
                           "-e", "trace=fsync,fdatasync,syncfs,sync", "-o", out])
        runs = 5
        for i in range(runs):
            frame, parts = s.ask(g.request("run-f%d" % i, "true\n"))
            assert receipt_of(parts)["outcome"]["kind"] == "completed"
        rc, err = s.close()
        assert rc == 0, err
        with open(out) as f:
            text = f.read()
        os.unlink(out)
        calls = sum(int(line.split()[1]) for line in text.splitlines()
                    if line.split() and line.split()[0] in ("fsync", "fdatasync", "syncfs", "sync"))
        print("    fsync-family calls: %d for %d runs" % (calls, runs), flush=True)
        assert 0 < calls <= 6 * runs, text
    finally:
        g.close()


if __name__ == "__main__":
    run_tests(globals())
