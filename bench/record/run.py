#!/usr/bin/env python3
"""bench/record: what MCP_RELAY_RECORD=video costs a run (issue 25), on machine-local (root).

A 10 s step on a 1280x800 display (an xclock ticking every second and a window moved by
xdotool every 0.5 s: a mostly still screen with some motion) runs ROUNDS times with the
recording on and ROUNDS times with it off, alternately, each in its own relay and guest. For
each run: the relay_script call's wall time (request to answer), and, with the recording, the
CPU time ffmpeg used in the guest during the step (read by the step itself from
/proc/<ffmpeg>/stat at its start and end), the recording's size and length.

    sudo python3 bench/record/run.py [build folder] [rounds]
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
from runs_support import run, stage, structured, text_of, variants  # noqa: E402

STEP = r"""
p=$(pgrep -x ffmpeg | head -1)
ticks() { [ -n "$p" ] && awk '{print $14+$15}' /proc/$p/stat || echo 0; }
xclock -update 1 -geometry 300x300+100+100 >/dev/null 2>&1 &
xeyes -geometry 200x150+600+300 >/dev/null 2>&1 &
xdotool search --sync --onlyvisible --class XEyes >/dev/null
t0=$(ticks); s0=$(date +%s%N)
i=0
while [ $i -lt 20 ]; do
  xdotool search --onlyvisible --class XEyes windowmove $((600 + (i % 5) * 80)) 300
  sleep 0.5; i=$((i + 1))
done
t1=$(ticks); s1=$(date +%s%N)
echo "cpu_ticks=$((t1 - t0)) step_ns=$((s1 - s0)) hz=$(getconf CLK_TCK)"
pkill -x xclock; pkill -x xeyes; true
"""


def one(binary, record):
    for v in variants(binary, kinds=("local",)):
        env = {"MCP_RELAY_RECORD": "video"} if record else {}
        with v.relay(**env) as r:
            r.initialize()
            g = v.acquire(r)
            assert stage(r, g["guest"])["isError"] is False
            t = time.monotonic()
            res = run(r, g["guest"], STEP, timeout=240, timeoutMs=60000, snapshots={"afterIntervalMs": 500})
            wall = (time.monotonic() - t) * 1000
            assert res["isError"] is False, text_of(res)[:2000]
            s = structured(res)
            out = dict(kv.split("=") for kv in s["stdout"].split() if "=" in kv)
            rec = s.get("recording")
            r.call_tool("relay_release", {"guest": g["guest"]}, timeout=300)
            return {"wall_ms": wall, "cpu_ticks": int(out["cpu_ticks"]), "step_ns": int(out["step_ns"]),
                    "hz": int(out["hz"]), "recording": rec}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    binary = os.path.join(build, "mcp-relay")
    on, off = [], []
    for i in range(rounds):
        off.append(one(binary, False))
        on.append(one(binary, True))
        print("round %d: off %.0f ms, on %.0f ms (ffmpeg %.1f%% of a core, %s bytes, %s ms)" % (
            i + 1, off[-1]["wall_ms"], on[-1]["wall_ms"],
            100.0 * on[-1]["cpu_ticks"] / on[-1]["hz"] / (on[-1]["step_ns"] / 1e9),
            on[-1]["recording"]["bytes"], on[-1]["recording"]["durationMs"]), flush=True)
    med_off = statistics.median(x["wall_ms"] for x in off)
    med_on = statistics.median(x["wall_ms"] for x in on)
    cpu = statistics.median(100.0 * x["cpu_ticks"] / x["hz"] / (x["step_ns"] / 1e9) for x in on)
    rate = statistics.median(x["recording"]["bytes"] / (x["recording"]["durationMs"] / 60000.0) / 1048576 for x in on)
    print(json.dumps({"rounds": rounds, "wall_ms_off": [round(x["wall_ms"], 1) for x in off],
                      "wall_ms_on": [round(x["wall_ms"], 1) for x in on],
                      "median_off_ms": round(med_off, 1), "median_on_ms": round(med_on, 1),
                      "ratio": round(med_on / med_off, 3), "ffmpeg_cpu_percent_median": round(cpu, 1),
                      "mib_per_minute_median": round(rate, 3)}, indent=1))


if __name__ == "__main__":
    main()
