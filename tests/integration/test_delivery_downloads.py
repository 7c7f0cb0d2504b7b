"""Background step downloads (spec/evidence.md §5.1, spec/lifecycle.md §7): a transient transport failure
is retried (3 attempts) and then pauses the queue; relay_status reports it from memory without
lifting it; the next call that reaches the guest lifts it; a lasting failure (a copy that
arrives corrupted) is not retried and does not pause; relay_finish brings home what failed
downloads left behind, and the coalesced count covers the steps it took over. A queue past
its bound of 64 jobs, and not paused, holds the next run back until the oldest job is done.

Transport failures are scripted as pull rules of the fault shim (tests/plugins/machine-faultshim).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import DeliveryEnv, download_records, review, structured, text_of  # noqa: E402


def wait_record(evidence, eid, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        rec = download_records(evidence).get(eid)
        if rec and rec["status"] != "queued":
            return rec
        if time.monotonic() > deadline:
            raise AssertionError("the download of %s never ended: %r" % (eid, rec))
        time.sleep(0.05)


def test_pause_after_transient_failure(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g, evidence = acq["guest"], acq["evidencePath"]
            env.stage(r, g)
            d = env.status_guest(r, g)["downloads"]
            assert d == {"queued": 0, "inFlight": 0, "downloaded": 0, "failed": 0, "cancelled": 0,
                         "coalesced": 0, "paused": False, "state": "open"}, d

            # A transport that resets every archive pull: three attempts, then a pause.
            env.write_control({"faults": [{"op": "pull", "match": "/.archive-", "fault": "fail", "code": "transient failure",
                                          "reason": "connection reset (fault script)", "times": -1}]})
            first = structured(env.run(r, g, "echo first"))["executionId"]
            rec = wait_record(evidence, first)
            assert rec["status"] == "failed", rec
            assert len(rec["attempts"]) == 3, rec["attempts"]
            assert all("connection" in a["error"] for a in rec["attempts"]), rec["attempts"]
            d = env.wait_downloads(r, g, lambda d: d["paused"] and d["inFlight"] == 0, what="a pause")
            assert d["failed"] == 1 and d["state"] == "open", d

            # relay_status answers from memory and does not lift it.
            env.write_control({"faults": []})
            time.sleep(0.3)
            assert env.status_guest(r, g)["downloads"]["paused"] is True

            # A call that reaches the guest does.
            env.diag(r, g, "true")
            assert env.status_guest(r, g)["downloads"]["paused"] is False
            second = structured(env.run(r, g, "echo second"))["executionId"]
            assert wait_record(evidence, second)["status"] == "downloaded"

            # A copy that arrives corrupted is a lasting failure: one attempt, no pause.
            env.write_control({"faults": [{"op": "pull", "match": "/.archive-", "fault": "corrupt", "times": 1}]})
            third = structured(env.run(r, g, "echo third"))["executionId"]
            rec = wait_record(evidence, third)
            assert rec["status"] == "failed" and len(rec["attempts"]) == 1, rec
            assert "checksum" in rec["attempts"][0]["error"], rec["attempts"]
            d = env.wait_downloads(r, g, lambda d: d["failed"] == 2 and d["inFlight"] == 0)
            assert d["paused"] is False and d["downloaded"] == 1, d

            # finish brings home what the failed downloads left in the guest.
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
        rc, data, err = review(binary, evidence)
        assert rc == 0, err
        executed = {d["executionId"] for d in data["details"].values()}
        assert {first, second, third} <= executed, executed
        for eid in (first, third):
            assert os.path.exists(os.path.join(evidence, "state", "receiver", "receipts", eid + ".json"))
    finally:
        env.cleanup()


def test_queue_bound_holds_the_next_run_back(binary):
    """spec/evidence.md §5.1: 64 queued jobs; only a queue past that bound, and not paused, makes a
    new run hold back until the oldest job is done. The first step download is made slow (45 s,
    far longer than the 65 runs that follow take here), so 64 steps queue behind it; the 66th
    run can only answer once that first download has ended."""
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g = acq["guest"]
            env.stage(r, g)
            env.write_control({"faults": [{"op": "pull", "match": "/.archive-", "fault": "delay", "delayMs": 45000,
                                          "times": 1}]})
            env.run(r, g, "true")
            env.wait_downloads(r, g, lambda d: d["inFlight"] == 1, what="the slow download in flight")
            for i in range(64):
                env.run(r, g, "true")
            d = env.status_guest(r, g)["downloads"]
            # The setup held: the slow download is still in flight and 64 wait behind it.
            assert d["inFlight"] == 1 and d["downloaded"] == 0 and d["queued"] == 64, d
            env.run(r, g, "true")
            d = env.status_guest(r, g)["downloads"]
            assert d["downloaded"] >= 1, ("the 66th run answered before the oldest job ended", d)
            assert d["queued"] <= 64, d
            d = env.wait_downloads(r, g, lambda d: d["downloaded"] == 66, timeout=120)
            assert d["failed"] == 0 and d["paused"] is False, d
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
