#!/usr/bin/env python3
"""Egress proxy speed (issue 23): a 1 GiB download through the proxy against the same download
made directly, and the connect latency the proxy adds, in one sitting, inside the closed world
of tests/integration/egress_support.py (nothing leaves the machine). Needs root.

    sudo bench/egress/run.py [BUILD_DIR] [ROUNDS] [CONNECTS]
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "integration"))
import egress_support  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "build")
rounds = sys.argv[2] if len(sys.argv) > 2 else "5"
connects = sys.argv[3] if len(sys.argv) > 3 else "300"
binary = os.path.abspath(os.path.join(build, "mcp-relay"))
with egress_support.World("egress-bench") as w:
    out = w.in_relay_ns("/usr/bin/python3", os.path.join(here, "inside.py"), binary, rounds, connects,
                        str(1 << 30), str(w.server_pid)).stdout
s = json.loads(out)
print(json.dumps({k: v for k, v in s.items() if k != "samples"}, indent=1))
print("samples: direct", json.dumps(s["samples"]["download_direct_s"]), "proxy",
      json.dumps(s["samples"]["download_proxy_s"]), "floor", json.dumps(s["samples"]["download_floor_s"]))
print("load average:", open("/proc/loadavg").read().split()[:3])
