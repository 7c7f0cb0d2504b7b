#!/usr/bin/env python3
"""Waiting for capacity (spec/lifecycle.md §5; spec/tools.md §3.4 steps 10-12; spec/mcp.md §16 item 31).

The fault shim (tests/plugins/machine-faultshim) over reference-machine refuses for capacity
as scripted; the test moves the frozen relay clock 15 s at a time, so the wait is checked
without waiting real time.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from lifecycle_support import (Shim, registry_rows, response_for, send_call, status,  # noqa: E402
                               wait_status)

REASON = "macOS VM limit reached (2 active)"
ARGS = {"task": "demo", "extractions": []}
CAPACITY = {"op": "acquire", "fault": "fail", "code": "at capacity", "reason": REASON}


def args(fake, **kw):
    """The acquisition's arguments with the image the wrapped plugin offers."""
    return dict(ARGS, image=fake.image, **kw)


def test_capacity_wait_ends_in_success_with_progress(binary):
    # Item 31: two capacity refusals, then the lease; progress notifications with the token.
    fake = Shim(binary)
    try:
        fake.script([dict(CAPACITY, times=2)])
        with fake.relay(MCP_RELAY_MAX_GUESTS=1) as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", args(fake), progress_token="acq-1")
            fake.wait_ops("acquire", 1)
            # While waiting: status shows it, and it counts against the guest limit.
            s = wait_status(r, lambda s: s["guests"] and s["guests"][0]["phase"] == "waiting-for-capacity",
                            what="waiting-for-capacity")
            g = s["guests"][0]
            assert g["capacityReason"] == REASON, g
            assert g["waitingSince"] is not None, g
            assert g["active"] is False
            limited = r.call_tool("relay_acquire", args(fake, task="other"))
            assert limited["isError"] is True
            assert limited["structuredContent"]["error"]["code"] == "guest-limit", limited
            assert "demo-1" in limited["structuredContent"]["error"]["message"]
            with open(os.path.join(fake.state_dir, "registry.md")) as f:
                assert len(registry_rows(f.read())) == 1  # the row is held while waiting
            fake.advance(15_000)
            fake.wait_ops("acquire", 2)
            fake.advance(15_000)
            resp = response_for(r, rid, timeout=30)
            result = resp["result"]
            assert result["isError"] is False, result
            assert result["structuredContent"]["waitedForCapacityMs"] >= 30000, result["structuredContent"]
            assert "waited 30 s for capacity" in result["content"][0]["text"].split("\n")[0], result
            progress = [n["params"] for n in r.notifications if n.get("method") == "notifications/progress"]
            assert len(progress) >= 3, progress
            assert all(p["progressToken"] == "acq-1" for p in progress), progress
            values = [p["progress"] for p in progress]
            assert values == sorted(values) and len(set(values)) == len(values), values
            assert any("host at capacity: " + REASON in p.get("message", "") for p in progress), progress
            # Every notification came before the response (they were read before it).
            assert len(fake.ops("acquire")) == 3
            s = status(r)
            assert s["guests"][0]["phase"] == "ready" and s["guests"][0]["waitedForCapacityMs"] >= 30000
            events = fake.events(s["guests"][0]["evidencePath"], "capacity-wait")
            assert len(events) == 2, events
    finally:
        fake.cleanup()


def test_capacity_wait_times_out_with_the_backend_reason(binary):
    fake = Shim(binary)
    try:
        fake.script([dict(CAPACITY, times=-1)])
        with fake.relay(MCP_RELAY_CAPACITY_WAIT=30) as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            fake.advance(15_000)
            fake.wait_ops("acquire", 2)
            fake.advance(15_000)
            fake.wait_ops("acquire", 3)
            resp = response_for(r, rid, timeout=30)
            result = resp["result"]
            assert result["isError"] is True
            sc = result["structuredContent"]
            assert sc["error"]["code"] == "capacity-timeout", sc
            assert REASON in sc["error"]["message"], sc
            assert sc["waitedForCapacityMs"] >= 30000 and sc["capacityWaitSeconds"] == 30, sc
            assert "waited 30 s" in sc["error"]["message"], sc
            # Attempts at 0, 15 and 30 s; the next would fall outside the budget.
            assert len(fake.ops("acquire")) == 3
            s = status(r)
            assert s["guests"] == [] and s["closedGuests"][0]["reason"] == "not-acquired", s
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_no_capacity_wait_when_the_budget_is_zero(binary):
    fake = Shim(binary)
    try:
        fake.script([dict(CAPACITY, times=-1)])
        with fake.relay(MCP_RELAY_CAPACITY_WAIT=0) as r:
            r.initialize()
            result = r.call_tool("relay_acquire", args(fake))
            sc = result["structuredContent"]
            assert sc["error"]["code"] == "capacity-timeout", sc
            assert sc["waitedForCapacityMs"] == 0 and sc["capacityWaitSeconds"] == 0, sc
            assert len(fake.ops("acquire")) == 1
    finally:
        fake.cleanup()


def test_other_refusals_pass_through_at_once_even_while_waiting(binary):
    fake = Shim(binary)
    try:
        fake.script([dict(CAPACITY, times=1),
                         {"op": "acquire", "fault": "fail", "code": "refused", "reason": "image is quarantined",
                          "times": 1}])
        with fake.relay() as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            fake.advance(15_000)
            result = response_for(r, rid, timeout=30)["result"]
            sc = result["structuredContent"]
            assert sc["error"]["code"] == "backend-refused", sc
            assert sc["error"]["message"] == "image is quarantined", sc
            assert len(fake.ops("acquire")) == 2
            # A definite refusal without any wait: answered at once.
            fake.script([{"op": "acquire", "fault": "fail", "code": "refused", "reason": "no", "times": 1}])
            direct = r.call_tool("relay_acquire", args(fake))["structuredContent"]
            assert direct["error"]["code"] == "backend-refused", direct
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_cancelling_a_capacity_wait_leases_nothing(binary):
    fake = Shim(binary)
    try:
        fake.script([dict(CAPACITY, times=-1)])
        with fake.relay() as r:
            r.initialize()
            rid = send_call(r, "relay_acquire", args(fake))
            fake.wait_ops("acquire", 1)
            r.notify("notifications/cancelled", {"requestId": rid, "reason": "changed my mind"})
            s = wait_status(r, lambda s: s["closedGuests"], what="the guest closed")
            assert s["closedGuests"][0]["reason"] == "not-acquired", s
            r.expect_silence(0.3)  # no response for a cancelled request
            fake.advance(60_000)
            r.expect_silence(0.5)
            assert len(fake.ops("acquire")) == 1
            events = fake.events(s["closedGuests"][0]["evidencePath"], "operation-cancelled")
            assert events and events[0]["details"]["uncertain"] is False, events
        assert registry_rows(fake.registry_text()) == []
    finally:
        fake.cleanup()


def test_unknown_outcome_is_settled_by_purpose(binary):
    fake = Shim(binary)
    try:
        # The answer is lost but the lease exists: adopted after one lookup by purpose.
        fake.script([{"op": "acquire", "fault": "drop", "times": 1}])
        with fake.relay() as r:
            r.initialize()
            res = r.call_tool("relay_acquire", args(fake))
            assert res["isError"] is False, res
            assert len(fake.ops("find_by_purpose")) == 1
            # Lost and nothing created: held as uncertain, never acquired again.
            fake.script([{"op": "acquire", "fault": "fail", "code": "outcome indeterminate", "times": 1}])
            res = r.call_tool("relay_acquire", args(fake))
            sc = res["structuredContent"]
            assert sc["error"]["code"] == "outcome-unknown" and sc["guest"] == "demo-2", sc
            g = [x for x in status(r)["guests"] if x["guest"] == "demo-2"][0]
            assert g["phase"] == "acquisition-uncertain", g
            assert len(fake.ops("acquire")) == 2
            rel = r.call_tool("relay_release", {"guest": "demo-2"})["structuredContent"]
            assert rel["reason"] == "not-acquired", rel
    finally:
        fake.cleanup()


def test_acquire_records_intent_row_and_probes(binary):
    fake = Shim(binary)
    try:
        probes = os.path.join(fake.session_dir, "probes")
        os.makedirs(probes, mode=0o700)
        with open(os.path.join(probes, "1790000000000-3b1c.json"), "w") as f:
            f.write('{"scope": "host"}\n')
        with fake.relay() as r:
            r.initialize()
            res = r.call_tool("relay_acquire", args(fake, ttlHours=2))
            assert res["isError"] is False, res
            sc = res["structuredContent"]
            head = res["content"][0]["text"].split("\n")[0]
            assert head == ("Acquired guest demo-1 (%s) for task demo; lease deadline %s; next: relay_stage"
                            % (fake.image, sc["deadline"])), head
            assert sc["waitedForCapacityMs"] == 0 and sc["guestsHeld"] == ["demo-1"], sc
            assert sc["purpose"].startswith("relay-demo-") and len(sc["purpose"]) == len("relay-demo-") + 8
            assert sc["guestRoot"].endswith("-mcp-relay-" + sc["purpose"]), sc
            kinds = [e["kind"] for e in fake.events(sc["evidencePath"])]
            # (Both carry the same frozen time, so their file order says nothing.)
            assert sorted(kinds) == ["acquire", "acquire-intent"], kinds
            copied = os.path.join(sc["evidencePath"], "host", "probes", "1790000000000-3b1c.json")
            with open(copied) as f:
                assert f.read() == '{"scope": "host"}\n'
            record = fake.record("demo-1")
            assert record["deadlineMs"] - record["acquiredAtMs"] == 2 * 3600 * 1000
            assert record["registryRow"]["taskName"] == sc["purpose"], record["registryRow"]
            assert record["binding"]["machine"] == fake.inner, record["binding"]
            assert record["acquisitionInFlight"] is False
            assert fake.spec(fake.ops("acquire")[0])["ttlMs"] == 15 * 60 * 1000
            # A short TTL asks for the TTL itself, not the window.
            short = r.call_tool("relay_acquire", args(fake, ttlHours=0.1))["structuredContent"]
            assert fake.spec(fake.ops("acquire")[-1])["ttlMs"] == 6 * 60 * 1000, fake.ops("acquire")[-1]
            assert short["guest"] == "demo-2"
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
