#!/usr/bin/env python3
"""bench/machine-docker/mcp_acquire.py — what the user gets: relay_acquire through MCP against
`podman run -d` of the same image on the same engine service, alternating, in one sitting
(issue 22, defect 9: target ≤ 1.2×).

Builds build-bench/ (RelWithDebInfo, no sanitizers, no tests) unless BUILD names a built tree,
starts Podman's API service with the integration tests' fixture (docker_support.Engine), imports
the "minimal" test image, starts one mcp-relay (MCP_RELAY_BACKEND=docker) and initializes it,
then ROUNDS times (alternating which goes first):

  - MCP: the wall time from writing the tools/call of relay_acquire {"image": "bench"} to reading
    its answer (health, the image inventory, the record, create, the runtime check, start); the
    guest is released untimed;
  - CLI: `podman --url <socket> run -d` of the same base image with the same isolation flags
    (network none, every capability dropped, no-new-privileges, pids/memory/CPU limits, user
    61000), until the CLI returns; removed untimed.

One untimed warm-up of each first (the relay's first acquire bakes the derived image).

    sudo bench/machine-docker/mcp_acquire.py          (BUILD, ROUNDS may be set)
"""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("SRC") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD") or os.path.join(REPO, "build-bench")
ROUNDS = int(os.environ.get("ROUNDS") or "10")

sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import docker_support  # noqa: E402
from relay_client import Relay  # noqa: E402


def acquire_once(r):
    t0 = time.perf_counter()
    res = r.call_tool("relay_acquire", {"task": "bench", "image": "bench", "extractions": []}, timeout=120)
    dt = time.perf_counter() - t0
    assert res["isError"] is False, res["content"][0]["text"]
    name = res["structuredContent"]["guest"]
    rel = r.call_tool("relay_release", {"guest": name}, timeout=120)
    assert rel["isError"] is False, rel["content"][0]["text"]
    return dt


def cli_once(cli, image, n):
    name = "md-mcp-bench-%d-%d" % (os.getpid(), n)
    argv = cli + ["run", "-d", "--name", name, "--network", "none", "--cap-drop", "ALL", "--security-opt",
                  "no-new-privileges", "--pids-limit", "1024", "--memory", "2g", "--memory-swap", "2g", "--cpus",
                  "2", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", "--user", "61000:61000", image,
                  "/usr/bin/sleep", "3600"]
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    subprocess.run(cli + ["rm", "-f", "-t", "0", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return dt


def main():
    if os.geteuid() != 0:
        print("mcp_acquire.py: run as root (the engine fixture is rootful)", file=sys.stderr)
        return 2
    binary = os.path.join(BUILD, "mcp-relay")
    if not os.environ.get("BUILD"):
        subprocess.run(["cmake", "-S", REPO, "-B", BUILD, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                        "-DRELAY_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", BUILD, "-j2"], check=True, stdout=subprocess.DEVNULL)
    os.environ["RELAY_BUILD_DIR"] = BUILD
    eng = docker_support.Engine("podman")
    try:
        image = eng.image("minimal")
        cli = ["podman", "--url", eng.endpoint]
        ver = subprocess.run(cli + ["version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
        load = open("/proc/loadavg").read().split()[:3]
        print("machine: %d cores, kernel %s, load %s; podman %s (%s)" % (
            os.cpu_count(), os.uname()[2], " ".join(load), ver, eng.runtime or "default runtime"), flush=True)
        with eng.relay(binary, {"bench": image}, extra_options={"display": "off"}) as r:
            r.initialize()
            print("warm-up: relay_acquire %.1f ms (bakes the derived image), run -d %.1f ms" % (
                acquire_once(r) * 1000, cli_once(cli, image, 0) * 1000), flush=True)
            mcp, run = [], []
            for i in range(ROUNDS):
                if i % 2 == 0:
                    mcp.append(acquire_once(r))
                    run.append(cli_once(cli, image, i + 1))
                else:
                    run.append(cli_once(cli, image, i + 1))
                    mcp.append(acquire_once(r))
        print("relay_acquire through MCP (ms): " + " ".join("%.1f" % (x * 1000) for x in mcp))
        print("podman run -d (ms):             " + " ".join("%.1f" % (x * 1000) for x in run))
        m, c = statistics.median(mcp) * 1000, statistics.median(run) * 1000
        print("medians: MCP %.1f ms, CLI %.1f ms, ratio %.2fx (target <= 1.2x)" % (m, c, m / c))
        print("load after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    finally:
        eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
