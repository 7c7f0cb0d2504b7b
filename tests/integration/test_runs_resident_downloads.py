#!/usr/bin/env python3
"""A run's step download over the resident channel (guestio/resident_calls.h): on every variant with the
stream trait, the archive, its pull and the removal of the transient archive go to `receiver serve`
when the channel is idle, so host/transfers records pulls by "channel"; every step download ends
`downloaded` with the run's stdout and stderr in the evidence; with the channel off
(MCP_RELAY_RESIDENT=off) the same downloads take the transport and end the same way."""
import collections
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runs_support as rs  # noqa: E402
from relay_client import run_tests  # noqa: E402


def downloads(evidence, want, timeout_s=30):
    deadline = time.time() + timeout_s
    while True:
        status = collections.Counter()
        for f in glob.glob(evidence + "/host/evidence-downloads/*.json"):
            status[json.load(open(f)).get("status")] += 1
        if status.get("downloaded", 0) >= want or time.time() > deadline:
            return status
        time.sleep(0.2)


def pull_methods(evidence):
    methods = collections.Counter()
    for f in glob.glob(evidence + "/host/transfers/*.json"):
        for t in json.load(open(f))["transfers"]:
            if t["op"] == "pull":
                methods[t["method"]] += 1
    return methods


def test_step_downloads_take_the_channel(binary):
    for v in rs.variants(binary, kinds=("local", "ssh")):
        for resident in ("on", "off"):
            with v.relay(MCP_RELAY_RESIDENT=resident) as r:
                r.initialize()
                g = v.acquire(r, task="dl-%s" % resident)
                assert rs.stage(r, g["guest"])["isError"] is False
                for i in range(4):
                    res = rs.run(r, g["guest"], "echo out-%d; echo err-%d >&2" % (i, i))
                    assert res["isError"] is False, rs.text_of(res)
                    time.sleep(0.5)  # the step download runs while the channel is idle
                status = downloads(g["evidencePath"], 4)
                assert status == {"downloaded": 4}, status
                methods = pull_methods(g["evidencePath"])
                print("  [%s] resident %s: pulls %s" % (v.kind, resident, dict(methods)), flush=True)
                if resident == "on":
                    assert methods.get("channel", 0) >= 4, methods
                else:
                    assert methods.get("channel", 0) == 0 and methods.get("transport", 0) >= 4, methods
                texts = []
                for p in glob.glob(g["evidencePath"] + "/**/*", recursive=True):
                    if os.path.isfile(p) and "/transfers/" not in p:
                        with open(p, "rb") as f:
                            texts.append(f.read())
                blob = b"\n".join(texts)
                assert b"out-3" in blob and b"err-3" in blob, "the last step's output is not in the evidence"

if __name__ == "__main__":
    run_tests(globals())
