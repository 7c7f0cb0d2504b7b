#!/usr/bin/env python3
"""serve's own requests for the host's step downloads (guest/receiver_protocol.h RECEIVER_REQ_COMMAND,
RECEIVER_REQ_FILE), driven directly against the static receiver the build made: `receiver archive` and
`receiver remove` run by serve answer what the same command run alone prints, with both streams as
parts and the exit status; any other command is refused and nothing runs; a file below R comes whole
with its SHA-256; a path outside R, `..`, a symlink, a folder, a missing file and a file over the
8 MiB limit are answered without bytes (the host then pulls through its transport), and serve goes on
after each, runs included."""
import hashlib
import json
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from test_receiver_serve import Serve, receipt_of  # noqa: E402
from test_receiver_stdin import Guest  # noqa: E402


def command(*argv):
    return json.dumps({"protocol": 1, "command": {"argv": list(argv)}}).encode() + b"\n"


def file_request(path):
    return json.dumps({"protocol": 1, "file": {"path": path}}).encode() + b"\n"


def write(g, rel, data):
    p = g.path(rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)
    return p


def test_archive_and_remove_as_the_command_alone(binary):
    g = Guest(binary)
    try:
        write(g, "state/step/a.txt", b"alpha\n")
        write(g, "state/step/sub/b.bin", bytes(range(256)) * 40)
        s = Serve(g)
        out = g.path(".archive-0123456789abcdef.tar")
        frame, parts = s.ask(command("archive", "--root", g.root, "--base", g.path("state/step"), "--out", out,
                                     "--", "a.txt", "sub/b.bin"))
        assert frame["commandExit"] == {"code": 0, "signal": None}, frame
        for name in ("stdout", "stderr"):
            fact, data = parts[name]
            assert fact["sha256"] == hashlib.sha256(data).hexdigest(), fact
        served = json.loads(parts["stdout"][1])
        with open(out, "rb") as f:
            tar_bytes = f.read()
        assert served["path"] == out and served["sha256"] == hashlib.sha256(tar_bytes).hexdigest(), served
        assert served["bytes"] == len(tar_bytes), served
        with tarfile.open(out) as t:
            assert sorted(m.name for m in t.getmembers() if m.isfile()) == [".relay-index.json", "a.txt", "sub/b.bin"], t.getnames()
        # the same command alone prints the same frame for the same files
        alone_out = g.path(".archive-fedcba9876543210.tar")
        alone = subprocess.run([g.bin, "archive", "--root", g.root, "--base", g.path("state/step"), "--out",
                                alone_out, "--", "a.txt", "sub/b.bin"], capture_output=True, check=True)
        a = json.loads(alone.stdout)
        assert (a["sha256"], a["bytes"], a.get("entries")) == (served["sha256"], served["bytes"],
                                                              served.get("entries")), (a, served)
        # the archive itself comes on the channel, whole
        frame, parts = s.ask(file_request(out))
        assert frame["file"]["path"] == out and parts["file"][1] == tar_bytes, frame
        assert parts["file"][0]["sha256"] == served["sha256"], parts["file"][0]
        # remove, then a bad use of a command serve runs: its own exit status and frame
        frame, parts = s.ask(command("remove", "--root", g.root, os.path.basename(out),
                                     os.path.basename(alone_out)))
        assert frame["commandExit"]["code"] == 0, (frame, parts)
        assert not os.path.exists(out) and not os.path.exists(alone_out)
        frame, parts = s.ask(command("archive", "--root", g.root))
        assert frame["commandExit"]["code"] == 2 and "error" in json.loads(parts["stdout"][1]), (frame, parts)
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()


def test_other_commands_are_refused_and_nothing_runs(binary):
    g = Guest(binary)
    try:
        s = Serve(g)
        for argv in (["run", "--root", g.root, "--stdin"], ["reset", "--root", g.root, "--id", "r1"],
                     ["serve", "--root", g.root], ["init", "--root", g.root, "--session", "x"]):
            frame, parts = s.ask(command(*argv))
            assert frame["receipt"] is None and frame["outcome"]["kind"] == "refused", frame
            assert "archive, remove" in frame["outcome"]["diagnostic"], frame
        frame, _ = s.ask(json.dumps({"protocol": 1, "command": {"argv": []}}).encode() + b"\n")
        assert frame["outcome"]["kind"] == "refused", frame
        assert not os.path.exists(g.path("recordings")), "a refused reset ran"
        # serve goes on: a run after them
        frame, parts = s.ask(g.request("run-after", "echo still\n"))
        assert receipt_of(parts)["stdout"] == "still\n", frame
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()


def test_files_that_do_not_come_on_the_channel(binary):
    g = Guest(binary)
    outside = Guest(binary)
    try:
        small = write(g, "state/x/small.json", b'{"k": 1}\n')
        big = write(g, "state/x/big.bin", b"\0" * (8 * 1024 * 1024 + 1))
        limit = write(g, "state/x/limit.bin", b"\1" * (8 * 1024 * 1024))
        os.symlink(small, g.path("state/x/link.json"))
        secret = write(outside, "secret", b"not yours\n")
        s = Serve(g)
        frame, parts = s.ask(file_request(small))
        assert parts["file"][1] == b'{"k": 1}\n', frame
        frame, parts = s.ask(file_request(limit))
        assert len(parts["file"][1]) == 8 * 1024 * 1024, frame["file"]
        for path, large in ((big, True), (g.path("state/x/link.json"), False), (g.path("state/x"), False),
                            (g.path("state/x/none"), False)):
            frame, parts = s.ask(file_request(path))
            assert frame["parts"] == [] and frame["error"] and frame["tooLarge"] is large, (path, frame)
        for path in (secret, g.path("state/../../") + os.path.basename(outside.root) + "/secret", g.root,
                     g.root + "//state/x/small.json"):
            frame, parts = s.ask(file_request(path))
            assert frame["outcome"]["kind"] == "refused" and "below" in frame["outcome"]["diagnostic"], frame
            assert parts == {}, parts
        frame, parts = s.ask(g.request("run-files", "echo ok\n"))
        assert receipt_of(parts)["outcome"]["kind"] == "completed", frame
        rc, err = s.close()
        assert rc == 0, err
    finally:
        g.close()
        outside.close()


if __name__ == "__main__":
    run_tests(globals())
