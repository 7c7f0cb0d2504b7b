#!/usr/bin/env python3
"""bench/runs/bench_ab_builds.py OLD_BINARY NEW_BINARY [ROUNDS] [--old-env K=V ...] [--new-env K=V ...]:
relay_script `true` on machine-local through MCP with two builds (or one build with two
environments, e.g. --old-env MCP_RELAY_DOWNLOADS_QUIET_MS=0) side by side in one sitting (one
guest each, rounds interleaved, the order swapped every round), for changes whose effect the load
of a shared machine would hide between sittings (bench/runs/README.md, "Host commit points").
Each binary finds the plugins of its own build; needs root and machine-local."""
import os
import statistics
import sys
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration")); sys.path.insert(0, os.path.join(SRC, "bench", "runs"))
import runs_support as rs
import bench_resident as br
args, env = [], {"old": {}, "new": {}}
it = iter(sys.argv[1:])
for a in it:
    if a in ("--old-env", "--new-env"):
        k, _, val = next(it).partition("=")
        env[a[2:5]][k] = val
    else:
        args.append(a)
old, new = args[0], args[1]
n = int(args[2]) if len(args) > 2 else 30
vo, _ = rs.make_variant(old, "local")
vn, _ = rs.make_variant(new, "local")
try:
    opts = '{"display":"off","maxGuests":2}'
    with vo.relay(MCP_RELAY_LOCAL_OPTIONS=opts, **env["old"]) as ro, \
            vn.relay(MCP_RELAY_LOCAL_OPTIONS=opts, **env["new"]) as rn:
        gs = []
        for k, (v, r) in enumerate(((vo, ro), (vn, rn))):
            r.initialize()
            g = v.acquire(r, task="ab%d" % k)
            assert rs.stage(r, g["guest"])["isError"] is False
            br.script_true(r, g["guest"], 3); gs.append(g["guest"])
        a, b = [], []
        for i in range(n):
            pair = [(ro, gs[0], a), (rn, gs[1], b)]
            if i % 2:
                pair.reverse()
            for r, g, xs in pair:
                xs += br.script_true(r, g, 1)[0]
                time.sleep(0.05)
        print("load %s" % open("/proc/loadavg").read().strip())
        br.line("old build %s" % " ".join("%s=%s" % kv for kv in env["old"].items()), a)
        br.line("new build %s" % " ".join("%s=%s" % kv for kv in env["new"].items()), b)
        print("  ratio new / old %.2f" % (statistics.median(b) / statistics.median(a)))
finally:
    vo.cleanup()
    vn.cleanup()
