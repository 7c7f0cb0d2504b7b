#!/usr/bin/env python3
"""bench/house/local_count.py BINARY RUNS OUT.callgrind: the instructions of the relay process
alone (callgrind, --trace-children=no: the guest, its receiver and `/bin/sh` are not counted)
over one MCP session on machine-local: initialize, acquire (no display), a stage, three warm-up
runs of `true`, then RUNS more runs of `true`, then the release and end of input. run.sh runs
it with RUNS=0 and RUNS=N for each build; the difference divided by N is one run's
instructions, whatever the session's start and end cost. Needs root and machine-local; uses
tests/integration/runs_support.py of this tree for both builds (the MCP wire is the same)."""
import os
import stat
import sys
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
sys.path.insert(0, os.path.join(SRC, "bench", "runs"))
import runs_support as rs  # noqa: E402

binary, runs, out = os.path.abspath(sys.argv[1]), int(sys.argv[2]), os.path.abspath(sys.argv[3])
# A wrapper beside the binary, so that the harness finds the plugins of the binary's own build.
wrapper = os.path.join(os.path.dirname(binary), "mcp-relay-callgrind")
with open(wrapper, "w") as f:
    f.write('#!/bin/sh\nexec valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$HOUSE_CG_OUT" '
            '"%s" "$@" 2>>"$HOUSE_CG_OUT.log"\n' % binary)
os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
os.environ["HOUSE_CG_OUT"] = out
v, why = rs.make_variant(wrapper, "local")
if v is None:
    sys.exit("machine-local cannot run here: %s" % why)
try:
    r = v.relay(MCP_RELAY_LOCAL_OPTIONS='{"display":"off"}')
    r.__enter__()
    r.initialize()
    res = r.call_tool("relay_acquire", dict(rs.ACQUIRE, task="house", image="local"), timeout=300)
    assert res["isError"] is False, rs.text_of(res)
    g = rs.structured(res)["guest"]
    res = rs.stage(r, g)
    assert res["isError"] is False, rs.text_of(res)
    for _ in range(3 + runs):
        res = rs.run(r, g, "true", timeout=300)
        assert res["isError"] is False, rs.text_of(res)
    time.sleep(3.0)  # the last run's step downloads end
    res = r.call_tool("relay_release", {"guest": g}, timeout=300)
    r.close_stdin()
    r.wait(timeout=300)
finally:
    v.cleanup()
with open(out) as f:
    for line in f:
        if line.startswith("summary:") or line.startswith("totals:"):
            print("%s Ir %s" % (os.path.basename(out), line.split()[1]))
            break
