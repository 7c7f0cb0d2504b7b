#!/usr/bin/env python3
"""bench/runs/bench_ab_builds.py OLD_BINARY NEW_BINARY [ROUNDS] [--old-env K=V ...] [--new-env K=V ...]:
relay_script `true` on machine-local through MCP with two builds (or one build with two
environments, e.g. --old-env MCP_RELAY_DOWNLOADS_QUIET_MS=0) side by side in one sitting (one
guest each, rounds interleaved, the order swapped every round), for changes whose effect the load
of a shared machine would hide between sittings (bench/runs/README.md, "Host commit points").
Each binary finds the plugins of its own build; needs root and machine-local. Beside the wall
times it prints the CPU time per run of each relay (all its threads, the background step
downloads included) and of each guest's `receiver serve` with its reaped workers and scripts
(/proc/<pid>/stat), which the load of other processes disturbs far less than wall time."""
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
        gs, roots = [], []
        for k, (v, r) in enumerate(((vo, ro), (vn, rn))):
            r.initialize()
            g = v.acquire(r, task="ab%d" % k)
            assert rs.stage(r, g["guest"])["isError"] is False
            br.script_true(r, g["guest"], 3); gs.append(g["guest"]); roots.append(g["guestRoot"])

        def cpu_ticks(pid):
            f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
            return sum(int(x) for x in f[11:15])  # utime stime cutime cstime
        serves = [br.serve_pids(root) for root in roots]
        assert all(len(x) == 1 for x in serves), serves
        pids = [ro.proc.pid, serves[0][0], rn.proc.pid, serves[1][0]]
        time.sleep(2.0)  # the warm-up runs' step downloads end
        c0 = [cpu_ticks(p) for p in pids]
        a, b = [], []
        for i in range(n):
            pair = [(ro, gs[0], a), (rn, gs[1], b)]
            if i % 2:
                pair.reverse()
            for r, g, xs in pair:
                xs += br.script_true(r, g, 1)[0]
                time.sleep(0.05)
        time.sleep(2.0)  # the last runs' step downloads end
        c1 = [cpu_ticks(p) for p in pids]
        per_run = [(y - x) * 1000.0 / os.sysconf("SC_CLK_TCK") / n for x, y in zip(c0, c1)]
        print("load %s" % open("/proc/loadavg").read().strip())
        print("  CPU per run: old relay %.2f ms + serve %.2f ms; new relay %.2f ms + serve %.2f ms" % tuple(per_run))
        br.line("old build %s" % " ".join("%s=%s" % kv for kv in env["old"].items()), a)
        br.line("new build %s" % " ".join("%s=%s" % kv for kv in env["new"].items()), b)
        print("  ratio new / old %.2f" % (statistics.median(b) / statistics.median(a)))
finally:
    vo.cleanup()
    vn.cleanup()
