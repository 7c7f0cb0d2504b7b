#!/usr/bin/env python3
"""relay_stage (spec/tools.md §3.5, spec/guest.md §2-§4): pushes verified by the receiver, host path
rules, limits before anything is sent, integrity, already-staged, unsupported platforms and
recording resets, over the fault shim on reference-machine, machine-local and transfer-ssh
(runs_support.py)."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from runs_support import (diag, events, run, sh, sha256_hex, stage, structured, text_of,  # noqa: E402
                          variants, write_tree)

WORKSPACE = {"a.txt": "alpha\n", "sub/b.txt": "bravo\n", "sub/deeper/c.bin": bytes(range(256)) * 40,
             "z.txt": ""}


def test_stage_pushes_verified_files(binary):
    for v in variants(binary):
        write_tree(os.path.join(v.project, "ws"), WORKSPACE)
        write_tree(v.project, {"fixtures/users.csv": "id,name\n1,ada\n"})
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name, root = g["guest"], g["guestRoot"]
            if v.kind == "shim":
                # The workspace's push refused as a transport built before RELAY_XFER_CALLER_VERIFIES
                # refuses the flag (reference-machine knows it; the shim's script stands in).
                v.write_control({"faults": [{"op": "push", "match": root + "/workspace", "fault": "fail",
                                             "code": "unsupported flags", "times": 1}]})
            res = stage(r, name, workspace="ws", files=[{"local": "fixtures/users.csv", "path": "data/users.csv"}])
            assert res["isError"] is False, text_of(res)
            s = structured(res)
            assert s["staged"] is True and s["receiver"]["remote"] == root + "/receiver", s
            assert s["receiver"]["platform"] in ("linux-x86_64", "linux-aarch64"), s
            assert s["workspace"] == root + "/workspace"
            assert s["workspaceFiles"] == {"count": 4, "bytes": sum(len(x) for x in WORKSPACE.values())}, s
            assert s["files"] == [{"local": os.path.join(os.path.realpath(v.project), "fixtures/users.csv"),
                                   "remote": root + "/support/data/users.csv",
                                   "sha256": sha256_hex(b"id,name\n1,ada\n"), "bytes": 14}], s
            assert s["recordingSessionId"].startswith("rec-") and len(s["recordingSessionId"]) == 20
            assert s["reset"] is None and s["updated"] == [] and s["nodePath"] == "node"
            assert s["capabilities"]["image"]["sources"] == ["display", "application", "reference"]
            assert text_of(res).startswith("Staged guest %s (" % name)
            assert "1 support file(s), workspace 4 file(s)" in text_of(res).split("\n")[0]
            # What landed in the guest, read back by the guest itself.
            out = sh(r, name, "cd %s && find workspace support -type f | sort && cat support/data/users.csv "
                              "&& stat -c %%a . receiver" % root)
            assert out.split("\n")[:5] == ["support/data/users.csv", "workspace/a.txt",
                                           "workspace/sub/b.txt", "workspace/sub/deeper/c.bin",
                                           "workspace/z.txt"], out
            assert "id,name\n1,ada\n" in out and out.rstrip().endswith("700\n700"), out
            # State, journal and the stage event.
            st = structured(r.call_tool("relay_status"))["guests"][0]
            assert st["staged"] is True and st["phase"] == "staged" and st["platform"] == s["receiver"]["platform"]
            ev = events(g["evidencePath"], "stage")
            assert len(ev) == 1 and ev[0]["details"]["recordingSessionId"] == s["recordingSessionId"], ev
            assert os.listdir(os.path.join(g["evidencePath"], "host", "transfers")), "no transfer record"
            if v.kind == "shim":
                # The workspace goes with RELAY_XFER_CALLER_VERIFIES (the scan checks it); refused
                # like a transport built before it (the script above), the core pushes again without it.
                pushes = [e["result"] for e in v.ops()
                          if e.get("op") == "push:end" and e.get("arg") == root + "/workspace"]
                assert pushes == ["unsupported flags", "ok"], pushes
            journal = sh(r, name, "cat %s/state/journal/events.jsonl" % root)
            assert '"session-start"' in journal, journal
            # No transient file is left in the guest root.
            left = sh(r, name, "ls -A %s" % root).split()
            assert not [n for n in left if n.startswith((".inventory-", ".push-", ".archive-"))], left


def test_transfer_ssh_options(binary):
    """MCP_RELAY_TRANSFER_SSH_OPTIONS reaches transfer-ssh: spareSessions 0 makes every
    operation start its own session; a bad value fails the call that needs the transport,
    naming the option and the variable, and keeps the guest (no quiet fallback to the
    machine plugin's own transport)."""
    for v in variants(binary, kinds=("ssh",)):
        write_tree(os.path.join(v.project, "ws"), WORKSPACE)
        with v.relay(MCP_RELAY_TRANSFER_SSH_OPTIONS='{"spareSessions":0}', MCP_RELAY_DEBUG="1") as r:
            r.initialize()
            g = v.acquire(r)
            res = stage(r, g["guest"], workspace="ws")
            assert res["isError"] is False, text_of(res)
            pushes = [line for line in r.stderr_text().splitlines() if "transfer-ssh: pushed" in line]
            assert pushes and all("(new session)" in line for line in pushes), pushes
        with v.relay(MCP_RELAY_TRANSFER_SSH_OPTIONS='{"spareSessions":9}') as r:
            r.initialize()
            g = v.acquire(r, task="bad-options")
            res = stage(r, g["guest"], workspace="ws")
            assert res["isError"] is True, text_of(res)
            text = text_of(res)
            assert "options.spareSessions must be a whole number from 0 to 8" in text, text
            assert "MCP_RELAY_TRANSFER_SSH_OPTIONS" in text, text
            assert structured(res)["error"]["code"] == "transfer-failed", structured(res)
            held = [x["guest"] for x in structured(r.call_tool("relay_status"))["guests"]]
            assert g["guest"] in held, held
            # Nothing reached the guest through another transport.
            assert not os.path.exists(os.path.join(g["guestRoot"], "receiver")), g["guestRoot"]


def test_limits_refused_before_anything_is_sent(binary):
    for v in variants(binary, kinds=("shim",)):
        many = os.path.join(v.project, "many")
        os.makedirs(many)
        for i in range(10001):
            open(os.path.join(many, "f%05d" % i), "w").close()
        big = os.path.join(v.project, "big")
        os.makedirs(big)
        with open(os.path.join(big, "sparse.bin"), "wb") as f:
            f.truncate(512 * 1024 * 1024 + 1)
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            before = len(v.ops())
            res = stage(r, g["guest"], workspace="many")
            assert res["isError"] is True and structured(res)["error"]["code"] == "staging-limit", text_of(res)
            assert "10001 files" in structured(res)["error"]["message"], text_of(res)
            res = stage(r, g["guest"], workspace="big")
            assert structured(res)["error"]["code"] == "staging-limit", text_of(res)
            assert "536870913 bytes" in structured(res)["error"]["message"], text_of(res)
            # Files and workspace count together.
            write_tree(v.project, {"one.txt": "1"})
            res = stage(r, g["guest"], workspace="big", files=[{"local": "one.txt", "path": "one.txt"}])
            assert structured(res)["error"]["code"] == "staging-limit"
            ops = [o["op"] for o in v.ops()[before:]]
            assert not [o for o in ops if o in ("exec", "push", "pull")], ops
            assert not os.path.exists(g["guestRoot"]), "the guest root was created"
            assert structured(r.call_tool("relay_status"))["guests"][0]["staged"] is False


def test_host_path_rules(binary):
    for v in variants(binary, kinds=("shim",)):
        p = v.project
        write_tree(p, {"ws/a.txt": "a", "real/x.txt": "x", "ok.sh": "echo ok\n"})
        os.symlink(os.path.join(p, "real"), os.path.join(p, "linked"))
        os.symlink(os.path.join(p, "real", "x.txt"), os.path.join(p, "ws", "link.txt"))
        os.symlink(os.path.join(p, "ok.sh"), os.path.join(p, "link.sh"))
        os.mkfifo(os.path.join(p, "real", "fifo"))
        outside = os.path.join(v.root, "outside.txt")
        with open(outside, "w") as f:
            f.write("secret")
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            before = len(v.ops())
            cases = [
                ({"workspace": "ws"}, "symbolic link"),
                ({"workspace": "linked"}, "symlink"),
                ({"workspace": "real"}, "special file"),
                ({"workspace": "../project/ws"}, ".."),
                ({"files": [{"local": "real/../ok.sh", "path": "ok.sh"}]}, ".."),
                ({"files": [{"local": outside, "path": "o.txt"}]}, "inside the project folder"),
                ({"files": [{"local": "link.sh", "path": "o.sh"}]}, "symlink"),
                ({"files": [{"local": "linked/x.txt", "path": "x.txt"}]}, "symlink"),
                ({"files": [{"local": "nothere.txt", "path": "x.txt"}]}, "does not exist"),
                ({"files": [{"local": "real", "path": "x"}]}, "not a regular file"),
            ]
            for args, fragment in cases:
                res = stage(r, name, **args)
                s = structured(res)
                assert res["isError"] and s["error"]["code"] == "path-refused", (args, text_of(res))
                assert fragment in s["error"]["message"], (args, s["error"]["message"])
            for local_path, fragment in (("link.sh", "symlink"), ("../x.sh", ".."), (outside, "project folder")):
                res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": False,
                                                   "localPath": local_path, "diagnostic": True})
                s = structured(res)
                assert s["error"]["code"] == "path-refused" and fragment in s["error"]["message"], s
            ops = [o["op"] for o in v.ops()[before:]]
            assert not [o for o in ops if o in ("exec", "push", "pull")], ops
            # An absolute path inside the project is accepted, and so is ".".
            res = stage(r, name, files=[{"local": os.path.join(p, "./ok.sh"), "path": "bin/ok.sh"}])
            assert res["isError"] is False, text_of(res)


def test_changed_source_is_detected(binary):
    for v in variants(binary, kinds=("shim", "ssh")):
        ws = os.path.join(v.project, "ws")
        write_tree(ws, {"steady.txt": "steady\n", "moving.txt": "x" * 4096})
        stop = threading.Event()

        def writer():
            path = os.path.join(ws, "moving.txt")
            n = 0
            while not stop.is_set():
                n += 1
                with open(path, "r+b") as f:
                    f.write(("%08d" % n).encode() * 512)

        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            t = threading.Thread(target=writer)
            t.start()
            try:
                res = stage(r, g["guest"], workspace="ws")
            finally:
                stop.set()
                t.join()
            s = structured(res)
            assert res["isError"] and s["error"]["code"] == "integrity-failed", text_of(res)
            msg = s["error"]["message"]
            assert "staging source changed" in msg or "staging checksum mismatch" in msg, msg
            assert "moving.txt" in msg or "changed" in msg, msg
            st = structured(r.call_tool("relay_status"))["guests"][0]
            assert st["staged"] is False and st["lastError"], st
            assert events(g["evidencePath"], "operation-failed"), "no operation-failed event"
            # A retry once the file is quiet stages, and overwrites what arrived.
            res = stage(r, g["guest"], workspace="ws")
            assert res["isError"] is False, text_of(res)
            out = sh(r, g["guest"], "cat %s/workspace/moving.txt | head -c 8" % g["guestRoot"])
            with open(os.path.join(ws, "moving.txt"), "rb") as f:
                assert out == f.read(8).decode(), out


def test_already_staged_and_corrected_paths(binary):
    for v in variants(binary):
        write_tree(v.project, {"ws/a.txt": "a", "f.txt": "f"})
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            assert stage(r, name, workspace="ws")["isError"] is False
            for args in ({"workspace": "ws"}, {"files": [{"local": "f.txt", "path": "f.txt"}]}):
                res = stage(r, name, **args)
                s = structured(res)
                assert s["error"]["code"] == "already-staged", text_of(res)
                assert "nodePath or cuaDriver" in s["error"]["message"]
            node = sh(r, name, "command -v node || true").strip()
            res = stage(r, name, nodePath="/nonexistent/node")
            assert res["isError"] is False, text_of(res)
            s = structured(res)
            assert s["files"] == [] and s["nodePath"] == "/nonexistent/node", s
            assert s["updated"][0]["field"] == "nodePath" and s["updated"][0]["check"]["ready"] is False, s
            assert "updated nodePath" in text_of(res).split("\n")[0]
            res = run(r, name, "console.log(1)", language="javascript")
            out = structured(res)
            assert out["outcome"]["kind"] == "refused", out
            assert "javascript" in out["outcome"]["diagnostic"], out
            if node:
                s = structured(stage(r, name, nodePath=node))
                assert s["updated"][0]["check"]["ready"] is True and s["updated"][0]["check"]["version"], s
                out = structured(run(r, name, "console.log(6*7)", language="javascript"))
                assert out["outcome"]["kind"] == "completed" and out["stdout"] == "42\n", out
            # The recording is the same one throughout.
            assert structured(r.call_tool("relay_status"))["guests"][0]["recordingSessionId"] == \
                s["recordingSessionId"]


def test_unsupported_platform(binary):
    for v in variants(binary, kinds=("shim",)):
        receivers = os.path.join(v.root, "receivers", "linux-riscv99")
        os.makedirs(receivers)
        with open(os.path.join(receivers, "receiver"), "w") as f:
            f.write("not a receiver")
        with v.relay(MCP_RELAY_RECEIVER_DIR=os.path.dirname(receivers)) as r:
            r.initialize()
            g = v.acquire(r)
            res = stage(r, g["guest"])
            s = structured(res)
            assert s["error"]["code"] == "unsupported-platform", text_of(res)
            msg = s["error"]["message"]
            assert msg.startswith("No guest receiver for 'Linux "), msg
            assert "Receivers installed for: linux-riscv99." in msg, msg
            assert "Build one with: cmake --build <build-dir> --target receiver-linux-" in msg, msg
            assert not os.path.exists(g["guestRoot"]), "something was pushed"
            probe = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": g["guest"]}))
            assert probe["platform"]["receiverAvailable"] is False, probe


def test_reset_recording(binary):
    for v in variants(binary):
        write_tree(v.project, {"ws/a.txt": "a"})
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name, root = g["guest"], g["guestRoot"]
            res = stage(r, name, resetRecording=True)
            assert structured(res)["error"]["code"] == "not-staged", text_of(res)
            first = structured(stage(r, name, workspace="ws"))
            out = run(r, name, "echo before-reset")
            assert out["isError"] is False, text_of(out)
            exec_id = structured(out)["executionId"]
            res = stage(r, name, resetRecording=True, workspace="ws")
            assert res["isError"] is False, text_of(res)
            s = structured(res)
            old = g["evidencePath"]
            assert s["reset"]["archivedTo"] == old and s["reset"]["recording"].startswith(root + "/recordings/")
            assert s["evidencePath"].startswith(old + "-recording-") and len(s["evidencePath"]) == len(old) + 19
            assert s["recordingSessionId"] != first["recordingSessionId"]
            # The old recording came home, verified, into the old evidence folder.
            with open(os.path.join(old, "state", "receiver", "receipts", exec_id + ".json")) as f:
                assert json.load(f)["executionId"] == exec_id
            assert events(old, "recording-reset-intent")
            assert events(s["evidencePath"], "recording-resumed")
            st = structured(r.call_tool("relay_status"))["guests"][0]
            assert st["previousEvidence"] == [{"path": old, "sessionId": first["recordingSessionId"],
                                               "guestState": "recordings/" + s["reset"]["recording"].rsplit("/", 1)[1]}]
            assert st["evidencePath"] == s["evidencePath"] and st["staged"] is True
            out = sh(r, name, "ls %s/recordings/*/journal && cat %s/state/session.json" % (root, root))
            assert s["recordingSessionId"] in out, out
            assert run(r, name, "echo after-reset")["isError"] is False


if __name__ == "__main__":
    run_tests(globals())
