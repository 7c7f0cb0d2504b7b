#!/usr/bin/env python3
"""The resident receiver's channel (spec/guest.md §17) through tests/plugins/machine-faultshim
wrapping machine-local (MCP_RELAY_BACKEND=<machine-faultshim.so>, MCP_RELAY_FAULTSHIM_PLUGIN=
<machine-local.so>): the shim forwards the transport's long-lived stream (RELAY_TRANSPORT_STREAM),
so runs take the resident path (`channel: "resident"`, the shim's log shows stream_open and a
stream_write per run), and its script breaks the stream the ways §17 items 3 and 4 name:

  stream_open fails      every run falls back to one round trip (`channel: "one-shot"`), once each;
  stream_write refused   nothing was handed over: the run goes into a channel opened again and runs
                         once (`resident`);
  stream_write dropped   the request went in whole and the answer is lost: the run is reported from
                         the guest's record or uncertain, never sent again (it ran once), and the
                         next run opens a new channel."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import diag, make_variant, run, stage, structured, text_of  # noqa: E402
from support_common import plugin_so, shim_so  # noqa: E402

OPTIONS = {"display": "off", "maxGuests": 2}


def shim_over_local(binary, control=None):
    if os.geteuid() != 0:
        skip("machine-local guests need the relay to run as root here")
    if not os.path.exists(shim_so(binary)):
        skip("machine-faultshim.so is not built")
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env.update({"MCP_RELAY_BACKEND": shim_so(binary),
                        "MCP_RELAY_FAULTSHIM_PLUGIN": plugin_so(binary, "machine-local"),
                        "MCP_RELAY_FAULTSHIM_OPTIONS": json.dumps(OPTIONS)})
    if control is not None:
        v.write_control(control)
    return v


def out_of(s):
    return s["output"] if isinstance(s.get("output"), str) else json.dumps(s.get("output"))


def ended(v, op, result="ok"):
    return [o for o in v.ops() if o["op"] == op + ":end" and o.get("result") == result]


def count_lines(r, guest, root):
    s = diag(r, guest, "cat %s/workspace/count 2>/dev/null; true" % root)
    return out_of(s).split()


def staged_guest(v, r):
    r.initialize()
    g = v.acquire(r)
    res = stage(r, g["guest"])
    assert res["isError"] is False, text_of(res)
    return g["guest"], g["guestRoot"]


def resident_then(v, r, fault):
    """A staged guest with one resident run behind it, then a script whose counters start there
    (it changed): the next stream_write meets `fault`."""
    guest, root = staged_guest(v, r)
    s = structured(run(r, guest, "echo 0 >> count\n"))
    assert s["channel"] == "resident", s
    v.write_control({"faults": [{"op": "stream_write", "nth": 1, "fault": fault}]})
    time.sleep(0.05)
    return guest, root


def test_runs_take_the_resident_path_through_the_shim(binary):
    v = shim_over_local(binary)
    try:
        with v.relay() as r:
            guest, root = staged_guest(v, r)
            for i in range(3):
                s = structured(run(r, guest, "echo run-%d\necho %d >> count\n" % (i, i)))
                assert s["channel"] == "resident" and s["stdout"] == "run-%d\n" % i, s
            assert len(ended(v, "stream_open")) == 1, v.ops()
            assert len(ended(v, "stream_write")) >= 3, [o["op"] for o in v.ops()]
            assert count_lines(r, guest, root) == ["0", "1", "2"]
    finally:
        v.cleanup()


def test_a_stream_that_cannot_open_falls_back_to_one_shot(binary):
    v = shim_over_local(binary, {"faults": [{"op": "stream_open", "fault": "fail", "times": -1}]})
    try:
        with v.relay() as r:
            guest, root = staged_guest(v, r)
            for i in range(2):
                s = structured(run(r, guest, "echo one-%d\necho %d >> count\n" % (i, i)))
                assert s["channel"] == "one-shot" and s["stdout"] == "one-%d\n" % i, s
            refused = ended(v, "stream_open", "transient failure")
            assert refused and not ended(v, "stream_open"), [(o["op"], o.get("result")) for o in v.ops()]
            assert not [o for o in v.ops() if o["op"] == "stream_write"], v.ops()
            assert count_lines(r, guest, root) == ["0", "1"]
    finally:
        v.cleanup()


def test_a_refused_write_goes_into_a_new_channel(binary):
    v = shim_over_local(binary)
    try:
        with v.relay() as r:
            guest, root = resident_then(v, r, "fail")  # the next write is refused unsent
            s = structured(run(r, guest, "echo again\necho 1 >> count\n"))
            assert s["channel"] == "resident" and s["stdout"] == "again\n", s
            assert len(ended(v, "stream_open")) == 2, [o["op"] for o in v.ops()]
            assert ended(v, "stream_write", "outcome indeterminate"), v.ops()
            assert count_lines(r, guest, root) == ["0", "1"]
    finally:
        v.cleanup()


def test_a_stream_broken_after_the_request_is_never_resent(binary):
    v = shim_over_local(binary)
    try:
        with v.relay() as r:
            guest, root = resident_then(v, r, "drop")  # the next request goes in, its answer is lost
            s = structured(run(r, guest, "echo 1 >> count\nsleep 1\n"))
            print("    run on the broken stream: %s" % json.dumps(s["outcome"])[:200], flush=True)
            assert s["channel"] == "resident", s
            if s["outcome"]["kind"] == "uncertain":
                assert "never sent again" in s["outcome"]["diagnostic"] or "receipt" in \
                    s["outcome"]["diagnostic"], s["outcome"]
            else:
                assert s["outcome"]["kind"] == "completed", s["outcome"]
            time.sleep(2)  # the worker that ran it ends on its own
            assert count_lines(r, guest, root) == ["0", "1"]  # once: never sent again
            s = structured(run(r, guest, "echo after\n"))
            assert s["channel"] == "resident" and s["stdout"] == "after\n", s
            assert len(ended(v, "stream_open")) == 2, [o["op"] for o in v.ops()]
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
