"""Capacity waits and unknown acquisition outcomes through the real mcp-relay binary on the
machine-service backend, against the real stand-in: the macOS limit (--macos-limit 1) makes
relay_acquire wait and ask again every 15 s of relay time (a frozen test clock the test moves),
a timed-out wait refuses with capacity-timeout, a dropped connection mid-acquire is settled by
purpose and a 500 before the lease leaves the guest acquisition-uncertain until relay_release
settles it. Nothing is ever acquired twice for one purpose."""

import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from service_support import Standin, error_code, structured, text, wait_until, write_clock  # noqa: E402


class Clock:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="relay-clock-")
        self.path = os.path.join(self.dir, "clock")
        self.now = int(time.time() * 1000)
        write_clock(self.path, self.now)

    def advance(self, ms):
        self.now += ms
        write_clock(self.path, self.now)


def start_call(r, name, arguments, rid, token=None):
    params = {"name": name, "arguments": arguments}
    if token:
        params["_meta"] = {"progressToken": token}
    r.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def response_for(r, rid, timeout=60):
    for msg in list(r.stray):
        if msg.get("id") == rid:
            r.stray.remove(msg)
            return msg
    deadline = time.monotonic() + timeout
    while True:
        msg = r.recv(timeout=max(0.1, deadline - time.monotonic()))
        if msg.get("id") == rid:
            return msg
        if "id" not in msg:
            r.notifications.append(msg)
        else:
            r.stray.append(msg)


def guest_phase(r, name):
    for g in structured(r.call_tool("relay_status"))["guests"]:
        if g["guest"] == name:
            return g["phase"]
    return None


def refusals(svc):
    return [e for e in svc.requests("POST", "/acquire")]


def test_capacity_wait_succeeds_once_a_macos_slot_frees(binary):
    svc = Standin(binary, ["--macos-limit", "1"])
    clock = Clock()
    try:
        with svc.relay(binary, MCP_RELAY_TEST_CLOCK_FILE=clock.path, MCP_RELAY_CAPACITY_WAIT=120) as r:
            r.initialize()
            first = r.call_tool("relay_acquire", {"task": "first", "image": "macos26", "extractions": []})
            assert first["isError"] is False, text(first)
            start_call(r, "relay_acquire", {"task": "second", "image": "macos26", "extractions": []}, "acq-2",
                       token="cap")
            wait_until(lambda: len(refusals(svc)) == 2, what="the refused second acquisition")
            wait_until(lambda: guest_phase(r, "second-1") == "waiting-for-capacity", what="waiting phase")
            rel = r.call_tool("relay_release", {"guest": "first-1"})
            assert rel["isError"] is False, text(rel)
            clock.advance(15000)
            msg = response_for(r, "acq-2")
            res = msg["result"]
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["guest"] == "second-1" and s["waitedForCapacityMs"] == 15000, s
            assert "; waited 15 s for capacity" in text(res).splitlines()[0]
            reqs = refusals(svc)
            assert len(reqs) == 3
            # Every try asked for the same purpose: the refusal was definite.
            purposes = {json.loads(e["body"])["purpose"] for e in reqs[1:]}
            assert purposes == {s["purpose"]}
            progress = [n for n in r.notifications if n.get("method") == "notifications/progress"]
            assert any("host at capacity: macOS VM limit reached (1 active)" in (p["params"].get("message") or "")
                       for p in progress), progress
    finally:
        svc.cleanup()


def test_capacity_wait_times_out(binary):
    svc = Standin(binary, ["--macos-limit", "1"])
    clock = Clock()
    try:
        with svc.relay(binary, MCP_RELAY_TEST_CLOCK_FILE=clock.path, MCP_RELAY_CAPACITY_WAIT=20) as r:
            r.initialize()
            assert r.call_tool("relay_acquire", {"task": "a", "image": "macos26", "extractions": []})["isError"] is False
            start_call(r, "relay_acquire", {"task": "b", "image": "macos26", "extractions": []}, "acq-b")
            wait_until(lambda: len(refusals(svc)) == 2, what="the first refusal")
            clock.advance(15000)
            wait_until(lambda: len(refusals(svc)) == 3, what="the second try")
            res = response_for(r, "acq-b")["result"]
            assert res["isError"] is True
            assert error_code(res) == "capacity-timeout", text(res)
            s = structured(res)
            assert s["capacityWaitSeconds"] == 20 and s["waitedForCapacityMs"] == 15000, s
            assert "macOS VM limit reached" in text(res)
            status = structured(r.call_tool("relay_status"))
            assert [g["guest"] for g in status["guests"]] == ["a-1"]
            assert [c["reason"] for c in status["closedGuests"]] == ["not-acquired"]
    finally:
        svc.cleanup()


def test_no_wait_when_the_budget_is_zero(binary):
    svc = Standin(binary, ["--macos-limit", "1"])
    try:
        with svc.relay(binary, MCP_RELAY_CAPACITY_WAIT=0) as r:
            r.initialize()
            assert r.call_tool("relay_acquire", {"task": "a", "image": "macos26", "extractions": []})["isError"] is False
            res = r.call_tool("relay_acquire", {"task": "b", "image": "macos26", "extractions": []})
            assert error_code(res) == "capacity-timeout", text(res)
            assert len(refusals(svc)) == 2
    finally:
        svc.cleanup()


def test_dropped_connection_mid_acquire_is_settled_by_purpose(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            svc.fault({"route": "acquire", "dropConnection": True, "phase": "after"})
            res = r.call_tool("relay_acquire", {"task": "drop", "image": "ubuntu2404", "extractions": []})
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["vm"] in svc.machines()
            acq = svc.requests("POST", "/acquire")
            assert len(acq) == 1, "acquire must never be retried blindly"
            listing = [e for e in svc.requests("GET", "/machines")]
            assert listing and listing[0]["seq"] > acq[0]["seq"]
            assert guest_phase(r, "drop-1") == "ready"
    finally:
        svc.cleanup()


def test_500_before_the_lease_is_outcome_unknown_then_settled(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            svc.fault({"route": "acquire", "status": 500, "error": "internal error"})
            res = r.call_tool("relay_acquire", {"task": "boom", "image": "ubuntu2404", "extractions": []})
            assert res["isError"] is True
            assert error_code(res) == "outcome-unknown", text(res)
            assert structured(res)["guest"] == "boom-1"
            assert "never acquire again blindly" in text(res)
            assert len(svc.requests("POST", "/acquire")) == 1
            assert guest_phase(r, "boom-1") == "acquisition-uncertain"
            # relay_release looks the purpose up, finds nothing and closes the guest.
            rel = r.call_tool("relay_release", {"guest": "boom-1"})
            assert rel["isError"] is False, text(rel)
            assert len(svc.requests("POST", "/acquire")) == 1
            assert svc.machines() == {}
    finally:
        svc.cleanup()


if __name__ == "__main__":
    run_tests(globals())
