#!/usr/bin/env python3
"""The soak (issue 17 point 6, docs/reliability.md "Soak"): GUESTS machine-local guests with
displays, RUNS recorded runs each, all guests at once (one relay_script per guest in flight at
every moment), every run with its before/after snapshots; every 10th round also a relay_image of
the run's after-snapshot and a relay_extract of a declared output, for every guest.

It checks, through the real binary:
  - every run answered completed with exit 0 and its own output;
  - every run has exactly one record: one execution-start and one execution-completion per
    executionId in the guest's journal (state/journal/events.jsonl of the package relay_finish
    delivers and verifies at the end);
  - order per guest holds: the journal lists each guest's runs in the order they were sent;
  - the server's RSS (VmRSS of /proc/<pid>/status) and open descriptors (/proc/<pid>/fd) are
    flat from the baseline (after round min(50, RUNS/4)) to the end, both sampled once no
    snapshot download is queued or in flight (relay_status): RSS grows by at most
    RSS_SLACK_BYTES + RSS_SLACK_RATIO x baseline, descriptors by at most FD_SLACK.

    python3 tests/soak/soak.py --binary build/mcp-relay                    # 4 guests x 200 runs
    python3 tests/soak/soak.py --binary build/mcp-relay --runs 50          # the CI form (ctest -L soak)

Prints one line per 25 rounds and ends with
    soak: G guests x R runs, N records, rss A -> B KiB, fds C -> D, S s
Exit 0 when every check held.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from relay_client import Skip, skip  # noqa: E402
from runs_support import make_variant, structured, text_of  # noqa: E402

RSS_SLACK_BYTES = 8 << 20  # allocator noise: arenas of threads that come and go
RSS_SLACK_RATIO = 0.10
FD_SLACK = 2  # a download or log descriptor that happens to be open at the sample
EXTRACTIONS = [{"name": "out", "path": "out.txt"}]


def server_pid(r):
    return r.proc.pid


def sample(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def quiesce(r, names, timeout=120):
    """Waits until no guest has a step download queued or in flight, so a sample sees the
    server at rest (a download holds descriptors and buffers while it runs)."""
    deadline = time.monotonic() + timeout
    while True:
        guests = structured(r.call_tool("relay_status", {}, timeout=60))["guests"]
        busy = [g["guest"] for g in guests if g.get("guest") in names
                and (g["downloads"]["queued"] or g["downloads"]["inFlight"])]
        if not busy:
            return
        assert time.monotonic() < deadline, ("downloads did not settle", busy)
        time.sleep(0.2)


def call_many(r, calls, timeout):
    """Sends every (tool, arguments) at once and waits for all answers; results in order."""
    ids = {}
    for i, (name, args) in enumerate(calls):
        rid = r.next_id()
        r.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": name, "arguments": args}})
        ids[rid] = i
    out = [None] * len(calls)
    deadline = time.monotonic() + timeout
    while any(o is None for o in out):
        msg = r.recv(max(0.001, deadline - time.monotonic()))
        if isinstance(msg, dict) and msg.get("id") in ids and "method" not in msg:
            assert "error" not in msg, msg
            out[ids[msg["id"]]] = msg["result"]
        elif isinstance(msg, dict) and "method" in msg and "id" not in msg:
            r.notifications.append(msg)
        else:
            r.stray.append(msg)
    del r.notifications[:]  # progress and log notifications are not kept: memory stays flat here too
    return out


def journal(evidence):
    """The guest's journal as delivered by relay_finish (the package verified)."""
    with open(os.path.join(evidence, "state", "journal", "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_records(events, sent):
    """sent: executionIds in the order they were sent to this guest."""
    # The soak runs nothing else in its guests, so every start must be one it sent.
    starts = [e["executionId"] for e in events if e.get("type") == "execution-start"]
    ends = [e["executionId"] for e in events if e.get("type") == "execution-completion"]
    assert starts == sent, ("order or count of execution-start", len(starts), len(sent))
    assert sorted(ends) == sorted(sent) and len(set(ends)) == len(ends), ("execution-completion", len(ends), len(sent))
    return len(starts)


def soak(binary, guests, runs):
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    t0 = time.monotonic()
    try:
        with v.relay(MCP_RELAY_MAX_GUESTS=str(max(guests, 4))) as r:
            r.initialize()
            names, evidence, sessions = [], {}, {}
            for _ in range(guests):
                res = r.call_tool("relay_acquire", {"task": "soak", "image": "local", "extractions": EXTRACTIONS},
                                  timeout=180)
                assert res["isError"] is False, text_of(res)
                g = structured(res)
                names.append(g["guest"])
                evidence[g["guest"]] = g["evidencePath"]
            for res, g in zip(call_many(r, [("relay_stage", {"guest": g}) for g in names], 600), names):
                assert res["isError"] is False, text_of(res)
                sessions[g] = structured(res)["recordingSessionId"]
                assert structured(res)["capabilities"]["snapshots"]["enabled"] is True, structured(res)
            pid = server_pid(r)
            sent = {g: [] for g in names}
            warmup = min(50, max(1, runs // 4))
            base = None
            for k in range(1, runs + 1):
                calls = [("relay_script", {"guest": g, "language": "shell", "inline": True,
                                           "code": "echo %s-%d > out.txt; cat out.txt" % (g, k)}) for g in names]
                for res, g in zip(call_many(r, calls, 600), names):
                    assert res["isError"] is False, text_of(res)
                    s = structured(res)
                    assert s["outcome"]["exitStatus"]["code"] == 0 and s["stdout"] == "%s-%d\n" % (g, k), s
                    sent[g].append(s["executionId"])
                if k % 10 == 0:
                    shots = [("relay_image", {"guest": g, "target": {
                        "source": "display", "sessionId": sessions[g], "executionId": sent[g][-1], "phase": "after"}})
                        for g in names]
                    for res in call_many(r, shots, 600):
                        assert res["isError"] is False, text_of(res)
                        assert structured(res)["imageDelivery"]["status"] == "attached", structured(res)
                    for res in call_many(r, [("relay_extract", {"guest": g, "names": ["out"]}) for g in names], 600):
                        assert res["isError"] is False, text_of(res)
                if k == warmup:
                    quiesce(r, names)
                    base = sample(pid)
                if k % 25 == 0 or k == runs:
                    rss, fds = sample(pid)
                    print("  round %d/%d: rss %d KiB, fds %d, %.0f s" % (k, runs, rss, fds, time.monotonic() - t0),
                          flush=True)
            quiesce(r, names)
            end = sample(pid)
            records = 0
            for res, g in zip(call_many(r, [("relay_finish", {"guest": g}) for g in names], 900), names):
                assert res["isError"] is False, text_of(res)
                s = structured(res)
                assert s["delivered"] is True and s["deliveryVerified"] is True and s["released"] is True, s
                records += check_records(journal(evidence[g]), sent[g])
            assert records == guests * runs, records
            rss_limit = base[0] + (RSS_SLACK_BYTES >> 10) + int(base[0] * RSS_SLACK_RATIO)
            print("soak: %d guests x %d runs, %d records, rss %d -> %d KiB (limit %d), fds %d -> %d, %.0f s"
                  % (guests, runs, records, base[0], end[0], rss_limit, base[1], end[1], time.monotonic() - t0),
                  flush=True)
            assert end[0] <= rss_limit, ("the server's RSS grew", base, end)
            assert end[1] <= base[1] + FD_SLACK, ("the server's descriptors grew", base, end)
    finally:
        v.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--guests", type=int, default=4)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    try:
        soak(os.path.abspath(a.binary), a.guests, a.runs)
    except Skip as e:
        print("SKIP soak: %s" % e, flush=True)
        return 0
    except Exception:
        import traceback
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
