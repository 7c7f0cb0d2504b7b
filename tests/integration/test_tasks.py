"""MCP Tasks at the byte level (docs/mcp.md, Tasks): clients that do not declare tasks see no
change; a task's final result is byte for byte the synchronous answer's result in both
generations; tasks/result (2025-11-25) waits for the task; per-guest order holds across a task
and a plain call; tasks/cancel stops a run as notifications/cancelled does and is never
replayed; batches and bad input. The fake backend runs the guests, so this runs
without root; tests/integration/node-tasks drives the same with the official clients on
machine-local."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import MODERN, Relay, run_tests  # noqa: E402
from runs_support import make_variant, stage  # noqa: E402
from support_common import structured  # noqa: E402

EXT = "io.modelcontextprotocol/tasks"
LONG = ["relay_acquire", "relay_extract", "relay_finish", "relay_release", "relay_script", "relay_stage"]


def meta(ext=True):
    caps = {"extensions": {EXT: {}}} if ext else {}
    return {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": caps}


def raw_request(r, method, params):
    """Sends a request; returns (raw answer line, parsed answer); notifications go to r.notifications."""
    rid = r.next_id()
    r.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        line = r.recv_raw(60)
        msg = json.loads(line)
        if "id" not in msg:
            r.notifications.append(msg)
            continue
        if msg.get("id") == rid:
            return line, msg
        r.stray.append(msg)


def result_bytes(line):
    head = line.index(b',"result":') + len(b',"result":')
    assert line.endswith(b"}"), line[-40:]
    return line[head:-1]


def legacy_with_tasks(r):
    r.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"tasks": {"list": {}, "cancel": {}}},
                             "clientInfo": {"name": "t", "version": "1"}})
    r.notify("notifications/initialized")


def test_clients_without_tasks_see_no_change(binary):
    with Relay(binary) as r:
        line, init = raw_request(r, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                   "clientInfo": {"name": "t", "version": "1"}})
        assert init["result"]["capabilities"] == {"tools": {}}, init
        tools = r.list_tools()["tools"]
        assert not [t for t in tools if "execution" in t], tools
        # params.task without the capability is ignored: a plain answer.
        res = r.request("tools/call", {"name": "relay_release", "arguments": {"guest": "x-1"}, "task": {}})
        assert "content" in res["result"] and "task" not in res["result"], res
        got = r.request("tasks/get", {"taskId": "x"})
        assert got["error"] == {"code": -32601, "message": "Method not found"}, got
        # A modern request without the extension: a plain answer, discover unchanged.
        res = r.request("tools/call", {"name": "relay_release", "arguments": {"guest": "x-1"}, "_meta": meta(False)})
        assert res["result"]["resultType"] == "complete", res
        d = r.request("server/discover", {"_meta": meta(False)})
        assert d["result"]["capabilities"] == {"tools": {}}, d


def test_legacy_tools_list_marks_the_six_long_tools(binary):
    with Relay(binary) as r:
        plain = r.request("tools/list", {})["result"]["tools"]
        legacy_with_tasks(r)
        tools = r.request("tools/list", {})["result"]["tools"]
        marked = sorted(t["name"] for t in tools if t.get("execution") == {"taskSupport": "optional"})
        assert marked == LONG, marked
        for a, b in zip(plain, tools):
            b = dict(b)
            b.pop("execution", None)
            assert json.dumps(a) == json.dumps(b), a["name"]
        # Modern requests list the tools as always.
        modern = r.request("tools/list", {"_meta": meta()})["result"]["tools"]
        assert json.dumps(modern) == json.dumps(plain)


def test_task_results_are_the_synchronous_bytes(binary):
    args = {"name": "relay_release", "arguments": {"guest": "nobody-1"}}
    with Relay(binary) as r:
        legacy_with_tasks(r)
        sync_line, _ = raw_request(r, "tools/call", args)
        _, created = raw_request(r, "tools/call", dict(args, task={"ttl": 60000}))
        task = created["result"]["task"]
        assert task["status"] == "working" and task["ttl"] is None and task["pollInterval"] > 0, created
        assert "io.modelcontextprotocol/model-immediate-response" in created["result"]["_meta"], created
        line, _ = raw_request(r, "tasks/result", {"taskId": task["taskId"]})
        related = b',"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"%s"}}}' % task["taskId"].encode()
        got = result_bytes(line)
        assert got.endswith(related), got[-120:]
        assert got[:-len(related)] + b"}" == result_bytes(sync_line), (got, sync_line)
        # Modern: tasks/get's result is byte for byte the plain answer's result.
        sync_line, _ = raw_request(r, "tools/call", dict(args, _meta=meta(False)))
        _, created = raw_request(r, "tools/call", dict(args, _meta=meta()))
        c = created["result"]
        assert c["resultType"] == "task" and c["status"] == "working" and c["ttlMs"] is None, c
        for _ in range(100):
            line, got = raw_request(r, "tasks/get", {"taskId": c["taskId"], "_meta": meta()})
            if got["result"]["status"] != "working":
                break
            time.sleep(0.05)
        assert got["result"]["status"] == "completed", got
        inner = line[line.index(b',"result":', line.index(b'"status"')) + len(b',"result":'):
                     line.rindex(b',"resultType":"complete","_meta":')]
        assert inner == result_bytes(sync_line), (inner, sync_line)


def test_bad_input(binary):
    with Relay(binary) as r:
        legacy_with_tasks(r)
        for params, code, words in [({}, -32602, "taskId"), ({"taskId": 3}, -32602, "taskId"),
                                    ({"taskId": "nope"}, -32602, "nope")]:
            got = r.request("tasks/get", params)
            assert got["error"]["code"] == code and words in json.dumps(got["error"]), got
        got = r.request("tools/call", {"name": "relay_status", "arguments": {}, "task": {}})
        assert got["error"]["code"] == -32601 and "taskSupport" in got["error"]["data"]["reason"], got
        got = r.request("tools/call", {"name": "relay_stage", "arguments": {"guest": "a-1"}, "task": []})
        assert got["error"]["code"] == -32602, got
        got = r.request("tasks/update", {"taskId": "x", "inputResponses": {}})
        assert got["error"]["code"] == -32601, got
        got = r.request("tasks/list", {"cursor": "x"})
        assert got["error"]["code"] == -32602, got
        # Modern: no extension declared, methods it has not, the other generation's task.
        got = r.request("tasks/get", {"taskId": "x", "_meta": meta(False)})
        assert got["error"]["code"] == -32021 and got["error"]["data"] == {
            "requiredCapabilities": {"extensions": {EXT: {}}}}, got
        got = r.request("tasks/result", {"taskId": "x", "_meta": meta()})
        assert got["error"]["code"] == -32601, got
        created = r.request("tools/call", {"name": "relay_release", "arguments": {"guest": "a-1"}, "task": {}})
        tid = created["result"]["task"]["taskId"]
        got = r.request("tasks/get", {"taskId": tid, "_meta": meta()})
        assert got["error"]["code"] == -32602 and "2025-11-25" in got["error"]["message"], got
        got = r.request("tasks/update", {"taskId": tid, "_meta": meta()})
        assert got["error"]["code"] == -32602 and "inputResponses" in json.dumps(got["error"]), got
        # Cancel of a finished task: -32602 in 2025-11-25.
        time.sleep(0.3)
        got = r.request("tasks/cancel", {"taskId": tid})
        assert got["error"]["code"] == -32602 and "already completed" in got["error"]["message"], got


def test_a_task_call_in_a_batch(binary):
    with Relay(binary) as r:
        legacy_with_tasks(r)
        batch = [{"jsonrpc": "2.0", "id": 900, "method": "tools/call",
                  "params": {"name": "relay_release", "arguments": {"guest": "a-1"}, "task": {}}},
                 {"jsonrpc": "2.0", "id": 901, "method": "ping"}]
        r.send(batch)
        answers = r.recv(10)
        while isinstance(answers, dict):  # a status notification may come first
            answers = r.recv(10)
        assert sorted(a["id"] for a in answers) == [900, 901] and "task" in [a for a in answers if a["id"] == 900][0]["result"]


def test_a_task_run_keeps_guest_order_waits_and_cancels(binary):
    v, why = make_variant(binary, "shim")
    if v is None:
        from relay_client import skip
        skip(why)
    try:
        with v.relay() as r:
            legacy_with_tasks(r)
            name = v.acquire(r)["guest"]
            assert stage(r, name)["isError"] is False
            long_args = {"guest": name, "language": "shell", "inline": True, "code": "sleep 3; echo long"}
            created = r.request("tools/call", {"name": "relay_script", "arguments": long_args, "task": {},
                                               "_meta": {"progressToken": "tp"}}, timeout=30)
            tid = created["result"]["task"]["taskId"]
            # tasks/result waits; a plain call for the same guest waits for the task's run.
            wait_id = r.next_id()
            r.send({"jsonrpc": "2.0", "id": wait_id, "method": "tasks/result", "params": {"taskId": tid}})
            t0 = time.monotonic()
            plain = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True, "code": "echo plain"},
                                timeout=60)
            assert structured(plain)["stdout"] == "plain\n"
            done = r.wait_response(wait_id, 60) if not [m for m in r.stray if m.get("id") == wait_id] else \
                [m for m in r.stray if m.get("id") == wait_id][0]
            assert structured(done["result"])["stdout"] == "long\n", done
            got = r.request("tasks/get", {"taskId": tid})["result"]
            assert got["status"] == "completed" and "pollInterval" not in got, got
            assert time.monotonic() - t0 >= 2.5
            # A cancelled run: its task says cancelled, its waiter is answered, nothing is replayed.
            created = r.request("tools/call", {"name": "relay_script", "task": {}, "arguments": {
                "guest": name, "language": "shell", "inline": True, "code": "sleep 30; echo never"}}, timeout=30)
            tid = created["result"]["task"]["taskId"]
            time.sleep(2)
            got = r.request("tasks/cancel", {"taskId": tid})
            assert got["result"]["status"] == "cancelled" and "notifications/cancelled" in got["result"]["statusMessage"], got
            got = r.request("tasks/result", {"taskId": tid})
            assert got["error"]["code"] == -32602 and "cancelled" in got["error"]["message"], got
            st = structured(r.call_tool("relay_status"))
            assert [x["guest"] for x in st["guests"]] == [name], st
            statuses = [n for n in r.notifications if n["method"] == "notifications/tasks/status"]
            assert {n["params"]["status"] for n in statuses} >= {"completed", "cancelled"}, statuses
            listed = r.request("tasks/list", {})["result"]["tasks"]
            assert len([t for t in listed if t["taskId"] == tid]) == 1, listed
    finally:
        v.cleanup()


def test_a_waiting_tasks_result_is_answered_before_the_session_ends(binary):
    v, why = make_variant(binary, "shim")
    if v is None:
        from relay_client import skip
        skip(why)
    try:
        with v.relay() as r:
            legacy_with_tasks(r)
            name = v.acquire(r)["guest"]
            assert stage(r, name)["isError"] is False
            created = r.request("tools/call", {"name": "relay_script", "task": {}, "arguments": {
                "guest": name, "language": "shell", "inline": True, "code": "sleep 3; echo ended"}}, timeout=30)
            tid = created["result"]["task"]["taskId"]
            r.send({"jsonrpc": "2.0", "id": "wait", "method": "tasks/result", "params": {"taskId": tid}})
            time.sleep(1)
            r.close_stdin()
            lines = [json.loads(x) for x in r.read_until_eof(120)]
            answers = [m for m in lines if m.get("id") == "wait"]
            # The end of the session lets a running call end (spec/lifecycle.md §11), so the waiter
            # gets the task's result, once, before the process exits.
            assert len(answers) == 1 and structured(answers[0]["result"])["stdout"] == "ended\n", lines
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
