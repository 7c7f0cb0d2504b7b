#!/usr/bin/env python3
"""The host's commit points of a recorded run (docs/runs.md, "Durability"; issue 24: at most 3
fsync-family calls per run on the host side), counted with strace on the real relay and a real
machine-local guest over MCP:

- per run the relay makes at most 3 calls of the fsync family, the background step download's
  included (one commit before the send, one before the answer, one per step download);
- the first commit point lies between the request's host copy (host/requests/<id>.json renamed
  into place) and the receiver receipt's (host/receiver-receipts/<id>.json, written only once
  the answer came): the run's files are durable before it is sent (spec/guest.md §16.2 item 1), and
  the receipt is durable (a commit after its rename) before the next run begins.

Needs root (machine-local guests), strace and machine-local.so."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import make_variant, run, stage, structured  # noqa: E402

OPTIONS = {"display": "off", "maxGuests": 2}
FAMILY = ("fsync", "fdatasync", "syncfs", "sync_file_range", "msync", "sync")
RUNS = 8


def test_a_run_makes_at_most_three_host_syncs(binary):
    if os.geteuid() != 0:
        skip("machine-local guests need the relay to run as root here")
    if shutil.which("strace") is None:
        skip("strace is not installed")
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(OPTIONS)
    try:
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r, task="durability")["guest"]
            assert stage(r, g)["isError"] is False
            assert run(r, g, "true")["isError"] is False
            time.sleep(3.0)  # the warm-up run's step download ends before the count starts
            out = os.path.join(v.root, "host.strace")
            t = subprocess.Popen(["strace", "-f", "-qq", "-y", "-e", "trace=%s,rename,renameat,renameat2"
                                  % ",".join(FAMILY), "-o", out, "-p", str(r.proc.pid)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            ids = []
            for i in range(RUNS):
                res = run(r, g, "echo %d" % i)
                s = structured(res)
                assert res["isError"] is False and s["stdout"] == "%d\n" % i, s
                ids.append(s["executionId"])
            time.sleep(3.0)  # the last step downloads end
            t.send_signal(signal.SIGINT)
            t.wait(timeout=20)
        lines = open(out).read().splitlines()
        syncs = [ln for ln in lines if re.search(r"^\d+\s+(%s)\(" % "|".join(FAMILY), ln)]
        assert len(syncs) <= 3 * RUNS, "%d fsync-family calls for %d runs:\n%s" % (
            len(syncs), RUNS, "\n".join(syncs[:60]))
        for eid in ids:
            req = [k for k, ln in enumerate(lines) if "rename" in ln and "host/requests/%s.json\"" % eid in ln]
            rcpt = [k for k, ln in enumerate(lines) if "rename" in ln and
                    "host/receiver-receipts/%s.json\"" % eid in ln]
            assert len(req) == 1 and len(rcpt) == 1, (eid, req, rcpt)
            between = [ln for ln in lines[req[0]:rcpt[0]] if "syncfs(" in ln or "fsync(" in ln]
            assert between, "no commit point between the request of %s and its answer" % eid
            after = [ln for ln in lines[rcpt[0]:] if "syncfs(" in ln or "fsync(" in ln]
            assert after, "the receiver receipt of %s was never made durable" % eid
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
