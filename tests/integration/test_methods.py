#!/usr/bin/env python3
"""Methods, notifications, subscriptions and duplicate ids (spec/mcp.md §2.1, §5, §10;
conformance checklist items 16-17)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402

UNSUPPORTED = ["prompts/list", "prompts/get", "resources/list", "resources/read", "resources/templates/list",
               "resources/subscribe", "logging/setLevel", "completion/complete", "tasks/list", "tasks/get",
               "sampling/createMessage", "roots/list", "no/such/method"]


def test_unsupported_methods(binary):
    # Item 16, and every other method of spec/mcp.md §5's table.
    with Relay(binary) as r:
        r.initialize()
        for method in UNSUPPORTED:
            resp = r.request(method, {})
            assert resp["error"] == {"code": -32601, "message": "Method not found"}, (method, resp)
        # In the modern era too.
        for method in ["prompts/list", "logging/setLevel"]:
            resp = r.request(method, {"_meta": Relay.modern_meta()})
            assert resp["error"]["code"] == -32601


def test_notifications_produce_nothing(binary):
    # Item 17.
    with Relay(binary) as r:
        r.notify("notifications/roots/list_changed")
        r.notify("notifications/initialized")
        r.notify("notifications/whatever", {"x": 1})
        r.notify("notifications/cancelled", {"requestId": 12345})
        r.notify("notifications/cancelled", {"requestId": 1, "reason": "never sent"})
        r.notify("ping")
        r.expect_silence(0.5)
        assert r.request("ping")["result"] == {}
        err = r.stderr_text()
        assert "roots/list_changed" not in err and "whatever" not in err


def test_subscriptions_listen_modern(binary):
    # Acknowledged with no notification types, held open, answered at the end of the session.
    with Relay(binary) as r:
        r.send({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                "params": {"_meta": Relay.modern_meta()}})
        ack = r.recv()
        assert ack == {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                       "params": {"notifications": {},
                                  "_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"}}}, ack
        r.expect_silence(0.3)
        assert r.request("ping")["result"] == {}
        # Its id is in flight: reusing it is refused.
        resp = r.request("ping", id="sub-1")
        assert resp["error"]["code"] == -32600 and resp["error"]["message"] == "Duplicate request id", resp
        r.close_stdin()
        final = r.recv()
        assert final["id"] == "sub-1", final
        res = final["result"]
        assert res["resultType"] == "complete"
        assert res["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"
        assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "relay"
        assert r.wait() == 0


def test_subscriptions_listen_cancelled_is_dropped(binary):
    with Relay(binary) as r:
        r.send({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
                "params": {"_meta": Relay.modern_meta()}})
        assert r.recv()["method"] == "notifications/subscriptions/acknowledged"
        r.notify("notifications/cancelled", {"requestId": 5, "reason": "done"})
        # The id is free again once cancelled.
        assert r.request("ping", id=5)["result"] == {}
        r.close_stdin()
        assert r.read_until_eof() == []
        assert r.wait() == 0


def test_subscriptions_listen_legacy(binary):
    with Relay(binary) as r:
        r.initialize()
        resp = r.request("subscriptions/listen", {})
        assert resp["error"]["code"] == -32601


def test_cancel_of_answered_or_initialize_is_ignored(binary):
    with Relay(binary) as r:
        r.initialize()
        r.notify("notifications/cancelled", {"requestId": 1})
        res = r.call_tool("relay_status", {})
        r.notify("notifications/cancelled", {"requestId": r._next_id})
        r.expect_silence(0.3)
        assert res["isError"] is False
        assert r.request("ping")["result"] == {}


if __name__ == "__main__":
    run_tests(globals())
