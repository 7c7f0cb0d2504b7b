#!/usr/bin/env python3
"""The receiver's run in one round trip (spec/guest.md §16.2, §16.3, guest/receiver_protocol.h),
driven directly against the static receiver the build made: the request and script framed on
standard input, the receipt and the after-image original framed on standard output; a
corrupted or short input is refused and nothing runs; one execution id runs once whatever path
it came by; a receiver killed between the started marker and the receipt ends in `uncertain`
at the next run of that id, never a second execution; at most 6 fsync-family calls on a run
without snapshots."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Skip, run_tests  # noqa: E402
from support_common import build_dir  # noqa: E402

SESSION = "rec-0123456789abcdef"


def receiver(binary):
    for platform in os.listdir(os.path.join(build_dir(binary), "libexec", "mcp-relay", "receivers")):
        path = os.path.join(build_dir(binary), "libexec", "mcp-relay", "receivers", platform, "receiver")
        if os.path.exists(path) and platform.endswith(os.uname().machine.replace("arm64", "aarch64")):
            return path
    raise Skip("no receiver built for this machine")


class Guest:
    def __init__(self, binary):
        self.bin = receiver(binary)
        self.root = tempfile.mkdtemp(prefix="relay-stdin-test-", dir="/var/tmp")
        os.chmod(self.root, 0o700)
        out = subprocess.run([self.bin, "init", "--root", self.root, "--session", SESSION],
                             capture_output=True, check=True)
        assert json.loads(out.stdout)["created"] is True
        os.makedirs(os.path.join(self.root, "workspace"), mode=0o700)

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def request(self, eid, code, capture=None, after_ms=0):
        script = code.encode()
        rel = "streamed/%s.sh" % eid
        req = {"protocol": 1, "executionId": eid, "sessionId": SESSION, "attemptId": "att-" + eid,
               "guest": "stdin-test", "because": "test", "evidenceMode": "recorded", "language": "shell",
               "script": {"path": self.path(rel), "sha256": hashlib.sha256(script).hexdigest(),
                          "bytes": len(script), "origin": "inline", "localName": None},
               "runtime": {"nodePath": None}, "cwd": self.path("workspace"), "timeoutMs": 20000,
               "step": {"id": "step-" + eid, "title": "test " + eid, "expected": "Exits with status 0",
                        "inputMode": "ordinary"},
               "snapshots": {"afterIntervalMs": after_ms, "group": None}, "capture": capture}
        body = json.dumps(req).encode()
        header = {"protocol": 1, "parts": [
            {"name": "request", "path": "requests/%s.json" % eid, "bytes": len(body),
             "sha256": hashlib.sha256(body).hexdigest()},
            {"name": "script", "path": rel, "bytes": len(script), "sha256": hashlib.sha256(script).hexdigest()}]}
        return json.dumps(header).encode() + b"\n" + body + script

    def run(self, data, wrap=None):
        cmd = (wrap or []) + [self.bin, "run", "--root", self.root, "--stdin"]
        p = subprocess.run(cmd, input=data, capture_output=True, timeout=120)
        return p.returncode, parse_output(p.stdout), p.stderr.decode(errors="replace")


def parse_output(out):
    nl = out.index(b"\n")
    frame = json.loads(out[:nl])
    rest = out[nl + 1:]
    parts = {}
    for part in frame.get("parts", []):
        data, rest = rest[:part["bytes"]], rest[part["bytes"]:]
        assert hashlib.sha256(data).hexdigest() == part["sha256"], part
        parts[part["name"]] = (part, data)
    assert rest == b"", "bytes after the announced parts: %r" % rest[:80]
    return frame, parts


def test_one_round_trip(binary):
    g = Guest(binary)
    try:
        rc, (frame, parts), err = g.run(g.request("run-a", "echo hello\necho x >> count\n"))
        assert rc == 0, err
        assert frame["executionId"] == "run-a" and frame["duplicate"] is False, frame
        assert list(parts) == ["receipt"], frame
        receipt_bytes = parts["receipt"][1]
        with open(g.path("state/receiver/receipts/run-a.json"), "rb") as f:
            assert f.read() == receipt_bytes
        receipt = json.loads(receipt_bytes)
        assert receipt["outcome"]["kind"] == "completed" and receipt["stdout"] == "hello\n", receipt
        assert receipt["leftRunning"] == {"count": 0, "processes": []}, receipt
        # The parts went where spec/guest.md §9 puts them, byte for byte.
        assert os.path.exists(g.path("requests/run-a.json"))
        with open(g.path("streamed/run-a.sh")) as f:
            assert f.read() == "echo hello\necho x >> count\n"
        # The same id again, by the same path: answered from the receipt, nothing runs.
        rc, (frame2, parts2), err = g.run(g.request("run-a", "echo hello\necho x >> count\n"))
        assert rc == 0 and frame2["duplicate"] is True and frame2["requestMatches"] is True, frame2
        assert parts2["receipt"][1] == receipt_bytes
        # ... and by the old path (the request file on disk).
        p = subprocess.run([g.bin, "run", "--root", g.root, g.path("requests/run-a.json")],
                           capture_output=True)
        assert json.loads(p.stdout)["duplicate"] is True, p.stdout
        with open(g.path("workspace/count")) as f:
            assert f.read() == "x\n", "ran more than once"
    finally:
        g.close()


def test_bad_input_is_refused_and_nothing_runs(binary):
    g = Guest(binary)
    try:
        good = g.request("run-b", "echo ran > ran\n")
        header, rest = good.split(b"\n", 1)
        cases = {
            "corrupted script": header + b"\n" + rest[:-2] + b"X\n",
            "short stream": good[:-1],
            "long stream": good + b"extra",
            "no header line": b"{\"protocol\":1}",
            "parts out of order": json.dumps({"protocol": 1, "parts": list(reversed(
                json.loads(header)["parts"]))}).encode() + b"\n" + rest,
            "path outside requests/": header.replace(b"requests/run-b.json", b"workspace/run-b.json") + b"\n" + rest,
            "script not the request's": header.replace(b"streamed/run-b.sh", b"streamed/other.sh") + b"\n" + rest,
        }
        for name, data in cases.items():
            rc, (frame, parts), err = g.run(data)
            assert rc == 2, (name, rc, frame, err)
            assert frame["receipt"] is None and frame["outcome"]["kind"] == "refused", (name, frame)
            assert parts == {}, name
            assert not os.path.exists(g.path("workspace/ran")), name
            assert not os.path.exists(g.path("requests/run-b.json")), name
            assert not os.path.exists(g.path("state/receiver/started/run-b.json")), name
        rc, (frame, parts), err = g.run(good)
        assert rc == 0 and json.loads(parts["receipt"][1])["outcome"]["kind"] == "completed", frame
    finally:
        g.close()


def become_subreaper():
    """The killed receiver's script is reparented here, so it can be reaped: a zombie still
    counts as a live member of its group, and this machine's init may never reap it."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass
    except ChildProcessError:
        pass


def test_killed_receiver_is_uncertain_never_replayed(binary):
    become_subreaper()
    g = Guest(binary)
    try:
        code = "echo x >> count\nexec sleep 3600\n"
        data = g.request("run-k", code)
        p = subprocess.Popen([g.bin, "run", "--root", g.root, "--stdin"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(data)
        p.stdin.close()
        deadline = time.monotonic() + 20
        while not os.path.exists(g.path("workspace/count")) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.path.exists(g.path("state/receiver/started/run-k.json"))
        with open(g.path(".receiver-lock/owner.json")) as f:
            groups = json.load(f)["operationPids"]
        p.kill()
        p.wait()
        for pgid in groups:
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.2)
        reap_orphans()
        rc, (frame, parts), err = g.run(data)
        assert rc == 0, (frame, err)
        assert "receipt" in parts, (frame, err)
        receipt = json.loads(parts["receipt"][1])
        assert receipt["outcome"]["kind"] == "uncertain", receipt
        assert "will not be replayed" in receipt["outcome"]["diagnostic"], receipt
        with open(g.path("workspace/count")) as f:
            assert f.read() == "x\n", "a second execution"
    finally:
        g.close()


def traced_run(g, eid, strace_args):
    """Runs `true` as eid under strace (its options strace_args); the trace's text."""
    if shutil.which("strace") is None:
        raise Skip("strace is not installed")
    out = os.path.join(g.root, "..", os.path.basename(g.root) + ".strace")
    rc, (frame, parts), err = g.run(g.request(eid, "true\n"),
                                    wrap=["strace", "-f", "-qq"] + strace_args + ["-o", out])
    assert rc == 0, err
    with open(out) as f:
        text = f.read()
    os.unlink(out)
    return text


def test_at_most_six_fsyncs_without_snapshots(binary):
    g = Guest(binary)
    try:
        text = traced_run(g, "run-f", ["-c", "-U", "name,calls", "-e", "trace=fsync,fdatasync,syncfs,sync"])
        calls = sum(int(line.split()[1]) for line in text.splitlines()
                    if line.split() and line.split()[0] in ("fsync", "fdatasync", "syncfs", "sync"))
        print("    fsync-family calls: %d" % calls, flush=True)
        assert 0 < calls <= 6, text
    finally:
        g.close()


def test_small_rewrites_keep_their_inode(binary):
    """owner.json and the pending action record are rewritten in place (one sector, the same
    durability point): one new inode each per run, none replaced by a rename (issue 24). The
    records still read as whole JSON afterwards."""
    g = Guest(binary)
    try:
        text = traced_run(g, "run-i", ["-e", "trace=rename,renameat,renameat2"])
        owner = text.count('/.receiver-lock/owner.json"')
        action = text.count('/state/records/action/action-run-i.json"')
        print("    renames onto owner.json: %d, onto the action record: %d" % (owner, action), flush=True)
        assert owner == 1 and action == 1, text
        with open(g.path("state/records/action/action-run-i.json")) as f:
            assert json.load(f)["state"] == "recorded"
        assert not os.path.exists(g.path(".receiver-lock")), "the lock outlived the run"
    finally:
        g.close()


def fake_capture(g, size):
    path = g.path("..", os.path.basename(g.root) + "-capture")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "{ printf '\\211PNG\\r\\n\\032\\n'; head -c %d /dev/urandom; } > \"$1\"\n"
                "printf '{\"screenshot_file_path\":\"%%s\"}\\n' \"$1\"\n" % size)
    os.chmod(path, 0o700)
    return {"plugin": "capture-x11", "argv": [os.path.abspath(path), "@OUT@"], "check": "png-file",
            "timeoutMs": 10000}, path


def test_after_image_rides_the_answer(binary):
    g = Guest(binary)
    try:
        capture, script = fake_capture(g, 200000)
        rc, (frame, parts), err = g.run(g.request("run-i", "true\n", capture=capture))
        assert rc == 0, err
        assert list(parts) == ["receipt", "after-image"], frame
        receipt = json.loads(parts["receipt"][1])
        after = [d for d in receipt["imageEvidence"]["snapshots"] if d["phase"] == "after"][0]
        meta, image = parts["after-image"]
        assert meta["path"] == "state/snapshots/%s/%s" % (SESSION, after["fileName"]), meta
        assert len(image) == after["bytes"] and hashlib.sha256(image).hexdigest() == after["sha256"]
        with open(g.path(meta["path"]), "rb") as f:
            assert f.read() == image
        os.unlink(script)
        # Over 8 MiB the original stays for the background download.
        capture, script = fake_capture(g, 9 * 1024 * 1024)
        rc, (frame, parts), err = g.run(g.request("run-j", "true\n", capture=capture))
        assert rc == 0, err
        assert list(parts) == ["receipt"], frame
        os.unlink(script)
    finally:
        g.close()


if __name__ == "__main__":
    run_tests(globals())
