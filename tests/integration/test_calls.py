#!/usr/bin/env python3
"""tools/call and its result envelope without guests (spec/mcp.md §7, §8; spec/tools.md §2.2-§2.4;
conformance checklist items 24-28)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, RpcError, run_tests, text_json  # noqa: E402

PER_GUEST = ["relay_stage", "relay_script", "relay_image", "relay_extract", "relay_finish", "relay_release",
             "relay_console_resolve", "relay_console_open", "relay_console_cancel"]


def check_envelope(result):
    """spec/tools.md §2.3: one text block first, the text is headline + the pretty JSON of
    structuredContent, error exactly when isError."""
    assert result["content"][0]["type"] == "text"
    assert isinstance(result["isError"], bool)
    assert isinstance(result["structuredContent"], dict)
    headline, body = text_json(result)
    assert "\n" not in headline
    assert body == result["structuredContent"], (body, result["structuredContent"])
    text = result["content"][0]["text"]
    assert text.split("\n", 1)[1] == json.dumps(result["structuredContent"], indent=2, ensure_ascii=False)
    assert ("error" in result["structuredContent"]) == result["isError"]
    return headline


def test_status_with_nothing_held(binary):
    # Item 24.
    with Relay(binary) as r:
        r.initialize()
        res = r.call_tool("relay_status", {})
        assert res["isError"] is False
        sc = res["structuredContent"]
        assert sc["active"] is False and sc["guests"] == [] and sc["maxGuests"] == 4, sc
        headline = check_envelope(res)
        assert headline == "No guest held; renewal inactive", headline
        # arguments omitted is {}.
        assert r.call_tool("relay_status")["structuredContent"]["maxGuests"] == 4


def test_status_max_guests_setting(binary):
    with Relay(binary, env={"MCP_RELAY_MAX_GUESTS": "7"}) as r:
        assert r.call_tool("relay_status")["structuredContent"]["maxGuests"] == 7


def test_acquire_without_task(binary):
    # Item 25: invalid-input, and nothing written to the state directory.
    with Relay(binary) as r:
        r.initialize()
        r.call_tool("relay_status")
        # Plugins start in the background and may create their own state folders:
        # wait until the state directory stops changing before taking the snapshot.
        before = r.state_files()
        deadline = time.monotonic() + 15
        stable_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - stable_since < 1.0:
            time.sleep(0.1)
            now = r.state_files()
            if now != before:
                before, stable_since = now, time.monotonic()
        res = r.call_tool("relay_acquire", {"image": "ubuntu2404", "extractions": []})
        assert res["isError"] is True
        assert res["content"][0]["text"].startswith("Invalid relay_acquire input:"), res
        assert res["structuredContent"]["error"]["code"] == "invalid-input"
        check_envelope(res)
        assert r.state_files() == before, r.state_files() ^ before
        assert not os.path.exists(os.path.join(r.state_dir, "registry.md"))
        assert not os.path.exists(os.path.join(r.project, "relay-evidence"))


def test_validation_messages(binary):
    # spec/tools.md §2.2: "Invalid <tool> input: <JSON pointer> <what is wrong>".
    cases = [
        ("relay_acquire", {"task": "Bad Task", "image": "x", "extractions": []},
         "Invalid relay_acquire input: /task must match ^[a-z0-9][a-z0-9-]{0,35}$"),
        ("relay_stage", {"guest": "a-1", "browserExecutable": "x"},
         "Invalid relay_stage input: /browserExecutable is not a field of relay_stage"),
        ("relay_status", {"x": 1}, "Invalid relay_status input: /x is not a field of relay_status"),
        ("relay_script", {"guest": "a-1", "language": "cobol", "inline": True, "code": "x"},
         "Invalid relay_script input: /language must be one of"),
        ("relay_search", {"name": "   "}, "Invalid relay_search input: /name must match \\S"),
        ("relay_search", {"name": "\u00a0\u2003"}, "Invalid relay_search input: /name must match \\S"),
        ("relay_probe", {"scope": "guest"}, "Invalid relay_probe input: /guest is required with scope guest"),
        ("relay_console_open", {"guest": "a-1", "console_id": "c", "attempt_id": "a", "userRequested": False,
                                "reason": "r", "expected": "e"},
         "Invalid relay_console_open input: /userRequested must be true"),
        ("relay_stage", {"guest": "NOPE"}, "Invalid relay_stage input: /guest must match"),
    ]
    with Relay(binary) as r:
        for tool, args, prefix in cases:
            res = r.call_tool(tool, args)
            text = res["content"][0]["text"]
            assert res["isError"] is True and text.startswith(prefix), (tool, text)
            assert res["structuredContent"]["error"]["code"] == "invalid-input"
            assert res["structuredContent"]["error"]["message"] == text.split("\n", 1)[0]


def test_unknown_tool(binary):
    # Item 26.
    with Relay(binary) as r:
        res = r.call_tool("relay_nope", {})
        assert res["isError"] is True
        assert res["content"][0]["text"].split("\n", 1)[0] == "Unknown tool: relay_nope"
        assert res["structuredContent"]["error"] == {"code": "unknown-tool", "message": "Unknown tool: relay_nope"}
        check_envelope(res)


def test_bad_call_params(binary):
    # Item 27 and the other malformed tools/call requests (spec/mcp.md §7).
    with Relay(binary) as r:
        for params in [{"name": "relay_status", "arguments": []}, {"name": "relay_status", "arguments": "x"},
                       {"name": "relay_status", "arguments": None}, {}, {"name": 7}, {"arguments": {}}]:
            resp = r.request("tools/call", params)
            assert resp["error"]["code"] == -32602, (params, resp)
        resp = r.request("tools/call")
        assert resp["error"]["code"] == -32602


def test_release_with_nothing_held(binary):
    # Item 28.
    with Relay(binary) as r:
        res = r.call_tool("relay_release", {"guest": "login-test-1"})
        assert res["isError"] is True
        sc = res["structuredContent"]
        assert sc["released"] is False and sc["error"]["code"] == "nothing-held", sc
        check_envelope(res)


def test_unknown_guest(binary):
    with Relay(binary) as r:
        for tool in PER_GUEST:
            if tool == "relay_release":
                continue
            args = {"guest": "nobody-1"}
            res = r.call_tool(tool, args)
            code = res["structuredContent"]["error"]["code"]
            # Schema-complete arguments are needed to reach the guest check; otherwise the
            # call is refused as invalid-input first (spec/tools.md §2.7 order).
            assert code in ("unknown-guest", "invalid-input"), (tool, res)
            check_envelope(res)


def test_duplicate_in_flight_id(binary):
    # spec/mcp.md §2.1: an id equal to that of a request still in flight is refused.
    with Relay(binary) as r:
        r.send({"jsonrpc": "2.0", "id": 42, "method": "subscriptions/listen",
                "params": {"_meta": Relay.modern_meta()}})
        r.recv()
        resp = r.request("tools/call", {"name": "relay_status"}, id=42)
        assert resp["error"] == {"code": -32600, "message": "Duplicate request id"}, resp
        # 42.0 is the same id for a JSON client.
        r.send_raw(b'{"jsonrpc":"2.0","id":42.0,"method":"ping"}\n')
        assert r.recv()["error"]["code"] == -32600
        # "42" is another id.
        assert r.request("ping", id="42")["result"] == {}


def test_rpc_error_helper(binary):
    with Relay(binary) as r:
        try:
            r.call_tool("relay_status", [])
        except RpcError as e:
            assert e.code == -32602
        else:
            raise AssertionError("arguments [] must be a JSON-RPC error")


if __name__ == "__main__":
    run_tests(globals())
