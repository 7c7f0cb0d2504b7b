#!/usr/bin/env python3
"""relay_script (spec/tools.md §3.6, spec/guest.md §6-§15): recorded runs in the four languages, timeouts
that kill the whole process tree, the output bound, nonzero exits, the replay rule, the
receiver lock, diagnostic scripts, cancellation and progress, over the fault shim on
reference-machine, machine-local and transfer-ssh (runs_support.py)."""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from runs_support import (diag, events, full, lead_headline_rest, run, sh, sha256_hex, stage, structured, text_of,  # noqa: E402
                          variants, write_tree)


def staged_guest(v, r, **stage_args):
    g = v.acquire(r)
    res = stage(r, g["guest"], **stage_args)
    assert res["isError"] is False, text_of(res)
    return g


def headline(res):
    return lead_headline_rest(text_of(res))[1]


def host_json(evidence, *parts):
    with open(os.path.join(evidence, *parts)) as f:
        return json.load(f)


def test_languages(binary):
    scripts = {
        "shell": ("echo \"$RELAY_STEP_ID $(basename \"$PWD\")\"", lambda out, step: out == step + " workspace\n"),
        "python": ("import os\nprint(os.environ['RELAY_STEP_ID'], os.path.basename(os.getcwd()))",
                   lambda out, step: out == step + " workspace\n"),
        "javascript": ("console.log(process.env.RELAY_STEP_ID, require('path').basename(process.cwd()))",
                       lambda out, step: out == step + " workspace\n"),
        "typescript": ("const n: number = 6 * 7;\nconsole.log(process.env.RELAY_STEP_ID, n)",
                       lambda out, step: out == step + " 42\n"),
    }
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name = g["guest"]
            probe = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": name}))
            snapshots = probe["snapshots"]["enabled"]
            for seq, (language, (code, check)) in enumerate(scripts.items(), start=1):
                if not probe["runtimes"][language]["ready"]:
                    print("    %s skipped: no %s runtime in this guest (%s)"
                          % (language, language, probe["runtimes"][language].get("diagnostic")), flush=True)
                    res = run(r, name, code, language=language)
                    s = structured(res)
                    assert s["outcome"]["kind"] == "refused", s
                    assert "no %s runtime" % language in s["outcome"]["diagnostic"], s
                    assert s["error"]["code"] == "execution-refused"
                    continue
                res = run(r, name, code, language=language)
                s = structured(res)
                assert res["isError"] is False, text_of(res)
                step = "%s-%d" % (language, seq)
                assert s["step"]["id"] == step and check(s["stdout"], step), s
                assert s["outcome"] == {"kind": "completed", "exitStatus": {"code": 0, "signal": None}}
                ext = {"shell": "sh", "python": "py", "javascript": "js", "typescript": "ts"}[language]
                assert s["script"]["remotePath"] == "%s/streamed/%s.%s" % (g["guestRoot"], s["executionId"], ext)
                assert s["script"]["sha256"] == sha256_hex(code.encode()) and s["script"]["localPath"] is None
                assert s["step"]["title"] == ("shell " + code if language == "shell" else "code (%s)" % language)
                expected = ("attached" if v.one_trip else "pending") if snapshots else "not-requested"
                assert s["imageDelivery"]["status"] == expected, s
                assert s["executionFailed"] is False
                assert headline(res) == {"imageDelivery": s["imageDelivery"], "executionFailed": False}
                assert "imageDelivery" not in json.loads(lead_headline_rest(text_of(res))[2])
                ev = g["evidencePath"]
                sub = host_json(ev, "host", "submissions", s["executionId"] + ".json")
                assert sub["step"] == s["step"] and sub["call"]["code"] == code, sub
                with open(os.path.join(ev, "host", "scripts", "%s.%s" % (s["executionId"], ext))) as f:
                    assert f.read() == code
                req = host_json(ev, "host", "requests", s["executionId"] + ".json")
                assert req["executionId"] == s["executionId"] and req["cwd"] == g["guestRoot"] + "/workspace"
                assert req["script"]["sha256"] == s["script"]["sha256"]
                assert (req["capture"] is not None) == snapshots, req
                rr = host_json(ev, "host", "receiver-receipts", s["executionId"] + ".json")
                assert rr["outcome"] == s["outcome"] and rr["stdout"] == s["stdout"], rr
                with open(os.path.join(ev, "host", "requests", s["executionId"] + ".json"), "rb") as f:
                    assert rr["requestSha256"] == sha256_hex(f.read())
                final = host_json(ev, "host", "receipts", s["executionId"] + ".json")
                assert final["executionId"] == s["executionId"] and final["outcome"] == s["outcome"]
            # A script file from the project, titled by its name.
            write_tree(v.project, {"scripts/hello.py": "print('hi from a file')\n"})
            if probe["runtimes"]["python"]["ready"]:
                res = r.call_tool("relay_script", {"guest": name, "language": "python", "inline": False,
                                                   "localPath": "scripts/hello.py"})
                s = structured(res)
                assert res["isError"] is False and s["stdout"] == "hi from a file\n", text_of(res)
                assert s["step"]["title"] == "script hello.py" and s["script"]["localPath"] == "scripts/hello.py"
                assert "/scripts/" in s["script"]["remotePath"] and s["script"]["remotePath"].endswith(".py")


def test_step_derivation_and_reuse(binary):
    for v in variants(binary, kinds=("shim",)):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name = g["guest"]
            s = structured(run(r, name, "#!/bin/sh\n\n   \n  ls -la  \necho two\n"))
            assert s["step"] == {"id": "shell-1", "title": "shell ls -la", "expected": "Exits with status 0",
                                 "inputMode": "ordinary"}, s
            assert s["reason"] == "Relay shell ls -la (no reason given)"
            s = structured(run(r, name, "#!/bin/sh\n", reason="Nothing to do",
                               step={"id": "custom.step", "expected": "Prints nothing"}))
            assert s["step"] == {"id": "custom.step", "title": "shell", "expected": "Prints nothing",
                                 "inputMode": "ordinary"}, s
            assert s["reason"] == "Nothing to do"
            res = run(r, name, "true", step={"id": "shell-1"})
            assert structured(res)["error"]["code"] == "invalid-input", text_of(res)
            assert "/step/id" in structured(res)["error"]["message"]
            # The caller's id "shell-4" makes the derived one skip ahead.
            assert structured(run(r, name, "true", step={"id": "shell-4"}))["step"]["id"] == "shell-4"
            assert structured(run(r, name, "true"))["step"]["id"] == "shell-5"
            s = structured(run(r, name, "x" * 600))
            assert len(s["step"]["title"]) == 500 and s["step"]["title"].startswith("shell xxx")
            res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True, "code": "true",
                                               "snapshots": {"afterIntervalMs": 1500}})
            assert structured(res)["snapshots"] == {"afterIntervalMs": 1500}
            req = host_json(g["evidencePath"], "host", "requests", structured(res)["executionId"] + ".json")
            assert req["snapshots"] == {"afterIntervalMs": 1500, "group": None}


def test_timeout_kills_the_process_tree(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name = g["guest"]
            code = ("sleep 301.25 &\n(sleep 302.25 &) \nsh -c 'sleep 303.25' &\necho started\nsleep 304.25\n")
            t0 = time.monotonic()
            res = run(r, name, code, timeoutMs=1500)
            took = time.monotonic() - t0
            s = structured(res)
            assert res["isError"] is True and s["error"]["code"] == "execution-uncertain", text_of(res)
            assert s["timedOut"] is True and s["outcome"]["kind"] == "uncertain", s
            assert s["stdout"] == "started\n" and s["terminationConfirmed"] is True, s
            assert took < 60, took
            left = sh(r, name, "ps -eo args | grep -c '^sleep 30[1-4].25' || true").strip()
            assert left == "0", "processes of the run survived: %s" % left
            # A script that ends on its own leaves what it started running (spec/guest.md §16.1),
            # and the result names it.
            nap = "305.%d" % random.randint(1000, 9999)  # the shim's (reference-machine's) guest is this machine
            s = structured(run(r, name, "sleep %s &\necho bye" % nap))
            assert s["outcome"]["kind"] == "completed" and s["stdout"] == "bye\n", s
            assert s["terminationConfirmed"] is True, s
            assert [p["command"] for p in s["leftRunning"]["processes"]] == ["sleep"], s
            left = sh(r, name, "ps -eo args | grep -c '^sleep %s' || true" % nap).strip()
            assert left == "1", left
            sh(r, name, "pkill -f '^sleep %s'; true" % nap)
            st = structured(r.call_tool("relay_status"))["guests"][0]
            assert st["staged"] is True and st["lastError"], st


def test_output_over_the_bound(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            res = run(r, g["guest"], "head -c 70000 /dev/zero | tr '\\0' a\necho never >&2\nsleep 30")
            s = full(res)
            assert structured(res)["resultTruncated"] is True and "[Truncated. Full result: " in text_of(res)
            assert s["outcome"]["kind"] == "uncertain" and s["outputTruncated"] is True, s
            assert len(s["stdout"]) + len(s["stderr"]) <= 65536 and set(s["stdout"]) == {"a"}, len(s["stdout"])
            assert s["timedOut"] is False and s["error"]["code"] == "execution-uncertain"


def test_nonzero_exit_keeps_the_guest(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            res = run(r, g["guest"], "echo out; echo err >&2; exit 3")
            s = structured(res)
            assert res["isError"] is True and s["error"]["code"] == "execution-failed", text_of(res)
            assert s["outcome"] == {"kind": "completed", "exitStatus": {"code": 3, "signal": None}}
            assert s["stdout"] == "out\n" and s["stderr"] == "err\n" and s["executionFailed"] is True
            assert headline(res)["executionFailed"] is True
            assert s["guestState"]["phase"] == "staged" and "status 3" in s["guestState"]["lastError"], s
            assert events(g["evidencePath"], "execution-failed")
            res = run(r, g["guest"], "kill -TERM $$")
            s = structured(res)
            assert s["outcome"]["exitStatus"] == {"code": None, "signal": "SIGTERM"}, s
            assert run(r, g["guest"], "true")["isError"] is False


def test_replay_of_a_request_runs_nothing(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name, root = g["guest"], g["guestRoot"]
            s = structured(run(r, name, "echo once >> \"$RELAY_WORKSPACE/count.txt\"; echo ran"))
            assert s["outcome"]["kind"] == "completed"
            req = "%s/requests/%s.json" % (root, s["executionId"])
            frame = sh(r, name, "%s/receiver run --root %s %s" % (root, root, req)).strip().splitlines()[-1]
            frame = json.loads(frame)
            assert frame["duplicate"] is True and frame["executionId"] == s["executionId"], frame
            assert frame.get("requestMatches") is True, frame
            assert sh(r, name, "cat %s/workspace/count.txt" % root) == "once\n"
            # A later identical call is a new execution, not a replay.
            s2 = structured(run(r, name, "echo once >> \"$RELAY_WORKSPACE/count.txt\"; echo ran"))
            assert s2["executionId"] != s["executionId"] and s2["outcome"]["kind"] == "completed"
            assert sh(r, name, "cat %s/workspace/count.txt" % root) == "once\nonce\n"


# The planted group's leader is a child of a shell that outlives it and reaps it (an orphan
# that dies may stay a zombie where PID 1 does not reap, and a zombie group counts as alive).
LOCK_SCRIPT = (
    "setsid sh -c 'setsid sleep %(secs)s </dev/null & echo $! > %(root)s/.lock-pgid; wait' "
    "</dev/null >/dev/null 2>&1 &\n"
    "sleep 0.3; pgid=$(cat %(root)s/.lock-pgid); rm -f %(root)s/.lock-pgid\n"
    "boot=$(cat /proc/sys/kernel/random/boot_id)\n"
    "mkdir -m 0700 %(root)s/.receiver-lock\n"
    "printf '{\"pid\":999999,\"startTime\":\"2000-01-01T00:00:00.000Z\",\"bootId\":\"%%s\","
    "\"executionId\":\"run-gone\",\"active\":true,\"operationPids\":[%%s],\"pendingSpawn\":false,"
    "\"settled\":false}' \"$boot\" \"$pgid\" > %(root)s/.receiver-lock/owner.json\n"
    "echo $pgid")


def plant_lock(r, name, root, secs):
    """A receiver lock whose owner is dead but whose process group still lives; returns the pgid."""
    out = sh(r, name, LOCK_SCRIPT % {"root": root, "secs": secs})
    return int(out.strip().splitlines()[-1])


def test_receiver_lock(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name, root = g["guest"], g["guestRoot"]
            pgid = plant_lock(r, name, root, "306.25")
            res = run(r, name, "echo must-not-run")
            s = structured(res)
            assert s["outcome"]["kind"] == "uncertain", s
            assert "receiver lock ownership or active operation is unconfirmed" in s["outcome"]["diagnostic"], s
            assert s["stdout"] == "" and s["imageDelivery"]["status"] == "not-requested", s
            # Once that group is gone the dead lock is reclaimed by the next run.
            sh(r, name, "kill -9 -%d; sleep 0.2; true" % pgid)
            s = structured(run(r, name, "echo after"))
            assert s["outcome"]["kind"] == "completed" and s["stdout"] == "after\n", s
            assert "retired" in sh(r, name, "ls -A %s" % root)
            # A recording reset is refused while a lock exists, and stays pending.
            pgid = plant_lock(r, name, root, "309.25")
            res = stage(r, name, resetRecording=True)
            assert structured(res)["error"]["code"] == "receiver-locked", text_of(res)
            assert "diagnose the active execution" in structured(res)["error"]["message"]
            st = structured(r.call_tool("relay_status"))["guests"][0]
            assert st["recordingResetPending"] is True, st
            assert structured(run(r, name, "true"))["error"]["code"] == "reset-pending"
            # Repaired with a diagnostic script, the pending reset completes on the next stage.
            sh(r, name, "kill -9 -%d; sleep 0.2; rm -rf %s/.receiver-lock" % (pgid, root))
            res = stage(r, name)
            assert res["isError"] is False and structured(res)["reset"] is not None, text_of(res)
            assert run(r, name, "true")["isError"] is False


def test_diagnostic_scripts(binary):
    for v in variants(binary):
        write_tree(v.project, {"diag.sh": "echo from-file; pwd\n"})
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name, root = g["guest"], g["guestRoot"]
            # What a diagnostic starts keeps running after it (spec/guest.md §16.1 item 7), through
            # every transport, and the diagnostic does not wait for it.
            nap = "306.%d" % random.randint(1000, 9999)
            t0 = time.monotonic()
            s = diag(r, name, "sleep %s >/dev/null 2>&1 &\necho started" % nap)
            assert s["outcome"]["exitStatus"]["code"] == 0 and s["output"] == "started\n", s
            assert time.monotonic() - t0 < 20, "the diagnostic waited for what it started"
            assert sh(r, name, "ps -eo args | grep -c '^sleep %s' || true" % nap).strip() == "1"
            sh(r, name, "pkill -f '^sleep %s'; true" % nap)
            s = diag(r, name, "echo out; echo err >&2; pwd; exit 4")
            assert s["evidenceMode"] == "diagnostic" and s["outcome"]["exitStatus"]["code"] == 4, s
            assert s["output"].startswith("out\n") and "err\n" in s["output"], s
            assert "/workspace" not in s["output"]
            assert s["outputStreams"] == "stdout and stderr combined" and s["screenshotEvidence"] is False
            assert s["imageDelivery"] == {"status": "not-requested",
                                          "diagnostic": "Diagnostic execution has no screenshot evidence."}
            assert s["error"]["code"] == "execution-failed" and s["executionId"].startswith("diagnostic-")
            ev = g["evidencePath"]
            req = host_json(ev, "host", "diagnostics", s["executionId"] + ".request.json")
            rec = host_json(ev, "host", "diagnostics", s["executionId"] + ".receipt.json")
            assert req["script"]["text"].startswith("echo out") and req["staged"] is False
            assert rec["outcome"] == s["outcome"] and rec["output"] == s["output"]
            assert "status 4" in structured(r.call_tool("relay_status"))["guests"][0]["lastError"]
            assert stage(r, name)["isError"] is False
            s = diag(r, name, "pwd")
            assert s["output"] == root + "/workspace\n", s
            s = structured(r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": False,
                                                        "localPath": "diag.sh", "diagnostic": True}))
            assert s["output"] == "from-file\n" + root + "/workspace\n", s
            # The output keeps its last 64,000 bytes.
            s = diag(r, name, "head -c 100000 /dev/zero | tr '\\0' b; echo END")
            assert s["outputTruncated"] is True and len(s["output"].encode()) <= 64000, len(s["output"])
            assert s["output"].endswith("bbbEND\n"), s["output"][-20:]
            assert s["outcome"]["kind"] == "completed"
            # 96 KiB at most, refused before anything reaches the guest.
            big = "#" + "x" * (98304 - 10) + "\necho ok\n"
            assert len(big.encode()) == 98304
            assert diag(r, name, big)["output"] == "ok\n"
            res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True,
                                               "code": "#" * 98305, "diagnostic": True})
            assert structured(res)["error"]["code"] == "invalid-input", text_of(res)
            write_tree(v.project, {"big.sh": "#" * 98305})
            res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": False,
                                               "localPath": "big.sh", "diagnostic": True})
            assert structured(res)["error"]["code"] == "invalid-input", text_of(res)
            # A diagnostic timeout is uncertain and kills the group.
            s = diag(r, name, "sleep 307.25 & sleep 308.25", timeout_ms=1000)
            assert s["outcome"]["kind"] == "uncertain" and s["error"]["code"] == "execution-uncertain", s
            assert sh(r, name, "ps -eo args | grep -c '^sleep 30[78].25' || true").strip() == "0"
            assert events(ev, "diagnostic")


def test_not_staged_and_sealed_refusals(binary):
    for v in variants(binary, kinds=("shim",)):
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            before = len(v.ops())
            res = run(r, g["guest"], "true")
            s = structured(res)
            assert s["error"]["code"] == "not-staged" and "relay_stage" in s["error"]["message"], s
            assert not [o for o in v.ops()[before:] if o["op"] in ("exec", "push")]
            assert text_of(res).split("\n")[0] == s["error"]["message"]


def _wait_for(predicate, timeout=20, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s" % what)


def _cancel_a_run(r, ev, args, delay_s):
    """Sends a relay_script, cancels it `delay_s` after its submission was recorded, and waits
    for the host receipt; returns (request id, execution id, host receipt)."""
    sub_dir = os.path.join(ev, "host", "submissions")
    before = set(os.listdir(sub_dir)) if os.path.isdir(sub_dir) else set()
    rid = r.next_id()
    r.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "relay_script", "arguments": args}})
    new = _wait_for(lambda: os.path.isdir(sub_dir) and sorted(set(os.listdir(sub_dir)) - before),
                    what="the submission")
    exec_id = new[0][:-5]
    time.sleep(delay_s)
    r.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    receipt = os.path.join(ev, "host", "receipts", exec_id + ".json")
    _wait_for(lambda: os.path.exists(receipt), what="the host receipt")
    return rid, exec_id, host_json(ev, "host", "receipts", exec_id + ".json")


def test_cancellation(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            name, root, ev = g["guest"], g["guestRoot"], g["evidencePath"]
            # A sleep of its own length, so that ps in a guest shared with this host sees only it.
            secs = "4.%03d" % random.randrange(1000)
            args = {"guest": name, "language": "shell", "inline": True, "code": "sleep %s; echo finished" % secs}
            # Cancelled while its files are still on their way, a run never starts; the delay
            # grows until the cancellation reaches a running script.
            for delay_s in (1.5, 3.0, 4.0):
                rid, exec_id, final = _cancel_a_run(r, ev, args, delay_s)
                if final.get("dispatched") is False:
                    assert "cancelled while the script was being sent" in final["outcome"]["diagnostic"], final
                    continue
                break
            # No response for that id; other calls are answered.
            assert r.request("ping")["result"] == {}
            r.expect_silence(1.0)
            assert not [m for m in r.stray if isinstance(m, dict) and m.get("id") == rid], r.stray
            assert final["outcome"]["kind"] == "uncertain" and "cancelled" in final["outcome"]["diagnostic"], final
            assert events(ev, "operation-cancelled"), "no operation-cancelled event"
            st = structured(r.call_tool("relay_status"))["guests"]
            assert [x["guest"] for x in st] == [name] and st[0]["staged"] is True
            guest_receipt = sh(r, name, "cat %s/state/receiver/receipts/%s.json" % (root, exec_id))
            gr = json.loads(guest_receipt)
            if v.kind == "service":
                # One command per machine at a time: the relay only stopped waiting; the script
                # ran on to its end and the receiver recorded that (spec/tools.md §3.6).
                assert gr["outcome"]["kind"] == "completed" and gr["stdout"] == "finished\n", gr
            else:
                # The script was stopped in the guest; the receiver wrote an uncertain receipt.
                assert gr["outcome"]["kind"] == "uncertain", gr
                assert "cancelled by the host" in gr["outcome"]["diagnostic"], gr
                assert "finished" not in gr["stdout"], gr
                left = sh(r, name, "ps -eo pid,ppid,pgid,stat,args | grep ' sleep %s$' | grep -v grep || true" % secs)
                assert left == "", left
            # A later identical call runs as a new execution.
            res = r.call_tool("relay_script", args)
            s = structured(res)
            assert res["isError"] is False and s["executionId"] != exec_id and s["stdout"] == "finished\n", s


def test_progress_while_a_run_lasts(binary):
    for v in variants(binary, kinds=("shim",)):
        with v.relay() as r:
            r.initialize()
            g = staged_guest(v, r)
            res = r.call_tool("relay_script", {"guest": g["guest"], "language": "shell", "inline": True,
                                               "code": "sleep 16; echo done"}, progress_token="p-1", timeout=120)
            assert structured(res)["stdout"] == "done\n"
            ticks = [n for n in r.notifications if n["method"] == "notifications/progress"]
            assert ticks and ticks[0]["params"]["progressToken"] == "p-1", r.notifications
            assert "of its 120 s limit" in ticks[0]["params"]["message"], ticks


if __name__ == "__main__":
    run_tests(globals())
