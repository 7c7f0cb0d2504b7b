#!/usr/bin/env python3
"""A refused acquisition closes its record (issue 22, defect 1; spec/lifecycle.md §8).

relay_acquire refused before any lease request (an image the backend does not offer) closes
the guest it reserved with reason "not-acquired". A second relay process of the same session
reads those closed records: it lists them under closedGuests, never under guests, they do
not count against MCP_RELAY_MAX_GUESTS, and a call naming one says it was closed — before the
fix the records had no purpose, so the new process took them for unusable records and held
them as "unavailable" phantoms that blocked every acquire.

A reservation the earlier process left before its acquisition got a purpose (ended between
the name's reservation and its identities) is closed the same way at restart: no lease
request can have been sent.

Runs on the fault shim over reference-machine (the core's rule, for every backend) and on machine-local
with image "nope" (the reproduction of the issue), each with two relay processes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, skip  # noqa: E402
from lifecycle_support import Shim, acquire, status  # noqa: E402
from support_common import plugin_so, structured, text_of  # noqa: E402


def refused(r, task, image="nope"):
    res = r.call_tool("relay_acquire", {"task": task, "image": image, "extractions": []})
    assert res["isError"] is True, res
    assert structured(res)["error"]["code"] == "image-unavailable", text_of(res)
    return res


def check_second_process(r, names):
    s = status(r)
    assert [g["guest"] for g in s["guests"]] == [], json.dumps(s["guests"])[:2000]
    closed = {c["guest"]: c for c in s["closedGuests"]}
    for n in names:
        assert n in closed, (n, s["closedGuests"])
        assert closed[n]["reason"] == "not-acquired", closed[n]
    for n in names:
        res = r.call_tool("relay_release", {"guest": n})
        # Closed, not held: "nothing-held" while no guest is open, "guest-closed" by name otherwise.
        assert res["isError"] is True, text_of(res)
        assert structured(res)["error"]["code"] in ("guest-closed", "nothing-held"), text_of(res)


def test_refused_acquires_leave_no_phantom_on_the_shim(binary):
    fake = Shim(binary)
    try:
        with fake.relay(MCP_RELAY_MAX_GUESTS=1) as r:
            r.initialize()
            for i in range(4):
                refused(r, "typo%d" % i)
            assert status(r)["guests"] == []
        with fake.relay(MCP_RELAY_MAX_GUESTS=1) as r:
            r.initialize()
            check_second_process(r, ["typo%d-1" % i for i in range(4)])
            # The only place the limit allows is free.
            got = acquire(r, image=fake.image)
            assert got["guest"] == "demo-1", got
            assert r.call_tool("relay_release", {"guest": "demo-1"})["isError"] is False
    finally:
        fake.cleanup()


def test_a_bare_reservation_is_closed_at_restart(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            refused(r, "typo")
        # The record as a process that ended right after reserving the name leaves it.
        path = os.path.join(fake.session_dir, "guests", "typo-1", "lease.json")
        with open(path) as f:
            record = json.load(f)
        assert record.get("purpose") is None, record
        record["phase"], record["closed"] = "acquiring", None
        with open(path, "w") as f:
            json.dump(record, f)
        with fake.relay(MCP_RELAY_MAX_GUESTS=1) as r:
            r.initialize()
            deadline_s = status(r)
            for _ in range(200):
                if not any(g["phase"] == "reconciling" for g in deadline_s["guests"]):
                    break
                deadline_s = status(r)
            check_second_process(r, ["typo-1"])
            assert fake.ops("acquire") == [], fake.ops()
            assert acquire(r, image=fake.image)["guest"] == "demo-1"
            assert r.call_tool("relay_release", {"guest": "demo-1"})["isError"] is False
    finally:
        fake.cleanup()


def test_refused_acquires_leave_no_phantom_local(binary):
    if os.geteuid() != 0:
        skip("machine-local's image \"local\" needs root here")
    if not os.path.exists(plugin_so(binary, "machine-local")):
        skip("machine-local.so is not built")
    fake = Shim(binary)  # only its folders
    try:
        env = {"MCP_RELAY_BACKEND": "local", "MCP_RELAY_SESSION": "refused-local", "MCP_RELAY_MAX_GUESTS": "1",
               "HOME": fake.root}
        with Relay(binary, env=env, state_dir=fake.state_dir, project=fake.project) as r:
            r.initialize()
            refused(r, "typo0")
            refused(r, "typo1")
        with Relay(binary, env=env, state_dir=fake.state_dir, project=fake.project) as r:
            r.initialize()
            check_second_process(r, ["typo0-1", "typo1-1"])
            res = r.call_tool("relay_acquire", {"task": "ok", "image": "local", "extractions": []}, timeout=120)
            assert res["isError"] is False, text_of(res)
            assert r.call_tool("relay_release", {"guest": "ok-1"}, timeout=120)["isError"] is False
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
