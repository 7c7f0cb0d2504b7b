#!/usr/bin/env python3
"""Runs on the resident receiver's channel (spec/guest.md §17 items 3, 4) through the real binary and
a real machine-local guest: once staged, the guest has one `receiver serve`; every recorded run
goes over it (`channel: "resident"` in the result and the host receipt) and is recorded once in
order; a channel that is gone when a run begins (serve killed) is opened again before the run; a
channel that breaks after the request went in whole (serve killed by the run itself, or the
receiver failpoint receiver.serve.after-read) leaves the run recorded once or uncertain, never
sent again. (A transport without the trait keeps `channel: "one-shot"` or `"pushed"`: the fake
backend's runs in test_runs_script.py.)"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import diag, make_variant, run, stage, structured, text_of, variants  # noqa: E402
from support_common import NO_SERVE, serve_pids_script  # noqa: E402
from test_crash_matrix import failpoints_built  # noqa: E402

OPTIONS = {"display": "off", "maxGuests": 2}


def local_variant(binary):
    if os.geteuid() != 0:
        skip("machine-local guests need the relay to run as root here")
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(OPTIONS)
    return v


def out_of(s):
    return s["output"] if isinstance(s.get("output"), str) else json.dumps(s.get("output"))


def serves(r, guest, root):
    """The pids of this guest's `receiver serve` processes (support_common.serve_pids_script)."""
    s = diag(r, guest, serve_pids_script(root))
    assert s["outcome"]["kind"] == "completed", s
    return [int(x) for x in out_of(s).split() if x.isdigit()]


def find_key(obj, key):
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = find_key(v, key)
            if found is not None:
                return found
    return None


def host_receipt(v, guest_root_hint, execution_id):
    for dirpath, _dirs, files in os.walk(v.project):
        if os.path.basename(dirpath) == "receipts" and execution_id + ".json" in files:
            with open(os.path.join(dirpath, execution_id + ".json")) as f:
                return json.load(f)
    return None


def test_runs_go_over_one_resident_channel(binary):
    for v in variants(binary, kinds=("local", "ssh")):
        if v.kind == "local":
            v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(OPTIONS)
        one_guest_life(v)


def one_guest_life(v):
    if True:
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            guest = g["guest"]
            res = stage(r, guest)
            assert res["isError"] is False, text_of(res)
            ids = []
            for i in range(5):
                res = run(r, guest, "echo run-%d\necho %d >> count\n" % (i, i))
                assert res["isError"] is False, text_of(res)
                s = structured(res)
                assert s["channel"] == "resident", s
                assert s["stdout"] == "run-%d\n" % i, s
                ids.append(s["executionId"])
            hr = host_receipt(v, g["guestRoot"], ids[-1])
            assert find_key(hr, "channel") == "resident", hr
            root = g["guestRoot"]
            pids = serves(r, guest, root)
            assert len(pids) == 1, pids
            # serve killed while idle: the next run opens the channel again and runs once
            diag(r, guest, "kill -9 %d" % pids[0])
            res = run(r, guest, "echo again\necho a >> count\n")
            s = structured(res)
            assert res["isError"] is False and s["channel"] == "resident", s
            new = serves(r, guest, root)
            assert len(new) == 1 and new != pids, (pids, new)
            # serve killed by the run itself after the request went in whole: the run is
            # recorded once (its receipt asked of the guest) or uncertain, never sent again
            res = run(r, guest, "echo k >> count\nkill -9 %d\nsleep 1\n" % new[0])
            s = structured(res)
            assert s["channel"] == "resident", s
            print("    run that killed serve: %s" % json.dumps(s["outcome"])[:200], flush=True)
            if s["outcome"]["kind"] == "uncertain":
                assert "never sent again" in s["outcome"]["diagnostic"] or "receipt" in \
                    s["outcome"]["diagnostic"], s["outcome"]
            # the worker that ran it finishes on its own and records it in the guest
            out = out_of(diag(r, guest, "sleep 2; ls %s/state/receiver/receipts/" % g["guestRoot"]))
            assert s["executionId"] + ".json" in out.split(), out
            count = out_of(diag(r, guest, "cat %s/workspace/count" % g["guestRoot"]))
            assert count.split() == ["0", "1", "2", "3", "4", "a", "k"], count
            res = run(r, guest, "echo after\n")
            s = structured(res)
            assert res["isError"] is False and s["channel"] == "resident" and s["stdout"] == "after\n", s
            assert len(serves(r, guest, root)) == 1


def test_broken_after_send_is_uncertain_never_resent(binary):
    if not failpoints_built(binary):
        skip("this build has no failpoints (configure with -DRELAY_FAILPOINTS=ON)")
    v = local_variant(binary)
    try:
        v.extra_env["MCP_RELAY_FAILPOINTS"] = "receiver.serve.after-read=crash"
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            guest = g["guest"]
            res = stage(r, guest)
            assert res["isError"] is False, text_of(res)
            res = run(r, guest, "echo x >> count\n")
            s = structured(res)
            assert s["channel"] == "resident", s
            assert s["outcome"]["kind"] == "uncertain", s["outcome"]
            assert "never sent again" in s["outcome"]["diagnostic"], s["outcome"]
            out = out_of(diag(r, guest, "cat %s/workspace/count 2>&1; ls %s/state/receiver/started/ | wc -l"
                              % (g["guestRoot"], g["guestRoot"])))
            assert "No such file" in out, out  # it never ran: it was not sent a second time
    finally:
        v.cleanup()


def test_a_receiver_without_serve_falls_back_to_one_shot(binary):
    """A guest whose receiver cannot serve (one staged by an older relay answers serve with its
    usage error): the run goes one-shot, runs once, and the record says so."""
    v = local_variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            guest, root = g["guest"], g["guestRoot"]
            res = stage(r, guest)
            assert res["isError"] is False, text_of(res)
            pids = serves(r, guest, root)
            assert len(pids) == 1, pids
            wrapper = "#!/bin/sh\n%sexec %s/receiver.real \"$@\"\n" % (NO_SERVE, root)
            diag(r, guest, "mv %s/receiver %s/receiver.real && printf '%%s' '%s' > %s/receiver && chmod 700 %s/receiver "
                           "&& kill -9 %d" % (root, root, wrapper.replace("'", "'\\''"), root, root, pids[0]))
            for i in range(2):
                res = run(r, guest, "echo old-%d\necho %d >> count\n" % (i, i))
                s = structured(res)
                assert res["isError"] is False and s["channel"] == "one-shot" and s["stdout"] == "old-%d\n" % i, s
            count = out_of(diag(r, guest, "cat %s/workspace/count" % root))
            assert count.split() == ["0", "1"], count
    finally:
        v.cleanup()


def test_diagnostics_go_over_the_channel(binary):
    """spec/guest.md §17 item 3: once staged, a diagnostic script goes over the guest's channel too
    (`channel: "resident"`; `receiver serve` is its parent), with §13's contract kept: output and
    error merged, the last 64,000 bytes with outputTruncated, the exit status, the limit killing
    its process group, no journal line and no receiver record. Before staging it is one exec."""
    for v in variants(binary, kinds=("local", "ssh")):
        if v.kind == "local":
            v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(OPTIONS)
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            guest, root = g["guest"], g["guestRoot"]
            s = diag(r, guest, "echo early")
            assert s["channel"] == "one-shot" and out_of(s) == "early\n", s
            res = stage(r, guest)
            assert res["isError"] is False, text_of(res)
            journal = "%s/state/journal/events.jsonl" % root
            lines0 = out_of(diag(r, guest, "wc -l < %s" % journal)).strip()
            s = diag(r, guest, "pwd; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; echo to-err >&2; exit 3")
            assert s["channel"] == "resident", s
            assert s["outcome"]["kind"] == "completed" and s["outcome"]["exitStatus"]["code"] == 3, s
            resident_id = s["executionId"]
            assert out_of(s).split("\n") == ["%s/workspace" % root, "%s/receiver serve --root %s " % (root, root),
                                              "to-err", ""], out_of(s)
            s = diag(r, guest, "head -c 70000 /dev/zero | tr '\\0' x; echo END")
            assert s["channel"] == "resident" and s["outputTruncated"] is True, {k: s[k] for k in s if k != "output"}
            assert len(out_of(s)) == 64000 and out_of(s).endswith("xEND\n"), len(out_of(s))
            s = diag(r, guest, "sleep 37 & exec sleep 38", timeout_ms=2000)
            assert s["channel"] == "resident" and s["outcome"]["kind"] == "uncertain", s
            assert "process group was killed" in s["outcome"]["diagnostic"], s["outcome"]
            left = out_of(diag(r, guest, "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' 2>/dev/null < $p/cmdline); "
                                         "case \"$c\" in 'sleep 37 '|'sleep 38 ') echo $c;; esac; done; true"))
            assert left.strip() == "", repr(left[-300:])
            # no journal line, no receiver record: a diagnostic never reaches the receiver's books
            assert out_of(diag(r, guest, "wc -l < %s" % journal)).strip() == lines0
            hr = None
            for dirpath, _dirs, files in os.walk(v.project):
                if os.path.basename(dirpath) == "diagnostics" and resident_id + ".receipt.json" in files:
                    hr = json.load(open(os.path.join(dirpath, resident_id + ".receipt.json")))
            assert find_key(hr, "channel") == "resident", hr
            res = run(r, guest, "echo still\n")
            s = structured(res)
            assert res["isError"] is False and s["channel"] == "resident" and s["stdout"] == "still\n", s
            assert len(serves(r, guest, root)) == 1


def test_docker_runs_go_over_one_attached_exec(binary):
    import docker_support
    why = docker_support.plugin_missing(binary)
    if why:
        skip(why)
    with docker_support.Engine() as eng:
        img = eng.image("minimal")
        with eng.relay(binary, {"minimal": img}, MCP_RELAY_SESSION="docker-resident") as r:
            r.initialize()
            acq = docker_support.acquire(r, "minimal")
            g, root = acq["guest"], acq["guestRoot"]
            st = r.call_tool("relay_stage", {"guest": g}, timeout=300)
            assert st["isError"] is False, text_of(st)
            for i in range(5):
                res = run(r, g, "echo d%d\necho %d >> count\n" % (i, i))
                s = structured(res)
                assert res["isError"] is False and s["channel"] == "resident" and s["stdout"] == "d%d\n" % i, s
            assert len(serves(r, g, root)) == 1
            out = out_of(diag(r, g, "cat %s/workspace/count" % root))
            assert out.split() == ["0", "1", "2", "3", "4"], out


if __name__ == "__main__":
    run_tests(globals())
