#!/usr/bin/env python3
"""bench/record: what MCP_RELAY_RECORD=video costs a run (issue 25), on machine-local (root).

A 10 s step on a 1280x800 display (an xclock ticking every second and a window moved by
xdotool every 0.5 s: a mostly still screen with some motion) runs ROUNDS times with the
recording on and ROUNDS times with it off, alternately, each in its own relay and guest. For
each run: the relay_script call's wall time (request to answer), and, with the recording, the
CPU time ffmpeg used in the guest during the step (read by the step itself from
/proc/<ffmpeg>/stat at its start and end), the recording's size and length, and the time from
sending the call to the script's first command (the step's own clock: machine-local's guests
share the host's), where the recorder's start shows without the step's noise.

    sudo python3 bench/record/run.py [build folder] [rounds] [--anchor=OTHER_BUILD]

With --anchor, each round also runs the recording on with the other build (for example the
same tree with an earlier receiver), in the same sitting, the order turned every round.
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
started_ns=$(date +%s%N)
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
echo "cpu_ticks=$((t1 - t0)) step_ns=$((s1 - s0)) hz=$(getconf CLK_TCK) started_ns=$started_ns"
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
            sent_ns = time.time_ns()
            res = run(r, g["guest"], STEP, timeout=240, timeoutMs=60000, snapshots={"afterIntervalMs": 500})
            wall = (time.monotonic() - t) * 1000
            assert res["isError"] is False, text_of(res)[:2000]
            s = structured(res)
            out = dict(kv.split("=") for kv in s["stdout"].split() if "=" in kv)
            rec = s.get("recording")
            r.call_tool("relay_release", {"guest": g["guest"]}, timeout=300)
            return {"wall_ms": wall, "cpu_ticks": int(out["cpu_ticks"]), "step_ns": int(out["step_ns"]),
                    "hz": int(out["hz"]), "recording": rec,
                    "to_script_ms": (int(out["started_ns"]) - sent_ns) / 1e6}


def med(xs, key):
    return round(statistics.median(x[key] for x in xs), 1)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--anchor=")]
    anchor = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--anchor=")]
    build = os.path.abspath(args[0] if args else os.path.join(HERE, "..", "..", "build"))
    rounds = int(args[1]) if len(args) > 1 else 5
    binary = os.path.join(build, "mcp-relay")
    anchor_binary = os.path.join(os.path.abspath(anchor[0]), "mcp-relay") if anchor else None
    on, off, anchor_on = [], [], []
    for i in range(rounds):
        # The order turns every round, so that no variant always follows another.
        plan = [(off, binary, False), (on, binary, True)] + ([(anchor_on, anchor_binary, True)] if anchor else [])
        for k in range(i % len(plan)):
            plan.append(plan.pop(0))
        for xs, b, record in plan:
            xs.append(one(b, record))
        print("round %d: off %.0f ms, on %.0f ms%s (ffmpeg %.1f%% of a core, %s bytes, %s ms)" % (
            i + 1, off[-1]["wall_ms"], on[-1]["wall_ms"],
            ", anchor on %.0f ms" % anchor_on[-1]["wall_ms"] if anchor else "",
            100.0 * on[-1]["cpu_ticks"] / on[-1]["hz"] / (on[-1]["step_ns"] / 1e9),
            on[-1]["recording"]["bytes"], on[-1]["recording"]["durationMs"]), flush=True)
    med_off = statistics.median(x["wall_ms"] for x in off)
    med_on = statistics.median(x["wall_ms"] for x in on)
    cpu = statistics.median(100.0 * x["cpu_ticks"] / x["hz"] / (x["step_ns"] / 1e9) for x in on)
    rate = statistics.median(x["recording"]["bytes"] / (x["recording"]["durationMs"] / 60000.0) / 1048576 for x in on)
    out = {"rounds": rounds, "load": open("/proc/loadavg").read().strip(),
           "wall_ms_off": [round(x["wall_ms"], 1) for x in off],
           "wall_ms_on": [round(x["wall_ms"], 1) for x in on],
           "median_off_ms": round(med_off, 1), "median_on_ms": round(med_on, 1),
           "ratio": round(med_on / med_off, 3), "added_ms": round(med_on - med_off, 1),
           "to_script_ms_off": med(off, "to_script_ms"), "to_script_ms_on": med(on, "to_script_ms"),
           "ffmpeg_cpu_percent_median": round(cpu, 1), "mib_per_minute_median": round(rate, 3)}
    if anchor:
        med_anchor = statistics.median(x["wall_ms"] for x in anchor_on)
        out.update({"wall_ms_anchor_on": [round(x["wall_ms"], 1) for x in anchor_on],
                    "median_anchor_on_ms": round(med_anchor, 1),
                    "anchor_ratio": round(med_anchor / med_off, 3),
                    "anchor_added_ms": round(med_anchor - med_off, 1),
                    "to_script_ms_anchor_on": med(anchor_on, "to_script_ms")})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
