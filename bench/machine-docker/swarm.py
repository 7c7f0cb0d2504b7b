#!/usr/bin/env python3
"""bench/machine-docker/swarm.py — acquire -> ready of a Swarm guest on a worker node against
the same on the manager's own node (issue 28's target: worker <= 1.3x manager), in one sitting.

A Swarm of two real dockerd (tests/integration/swarm_support.py: each in a network namespace of
its own, joined over addresses that exist only there): the manager and one worker. Two relays
run side by side on the same manager endpoint with every node's engine in options.nodes; one
pins its guests to the manager (options.placement.constraints ["node.role==manager"]), the
other to the worker (["node.role==worker"]). Rounds alternate which goes first. Each sample is
one relay_acquire over MCP (the same MCP and relay overhead for both), from the request to the
answer with a running lease: the intent, the derived image checked on every node, the overlay
network, the service, the wait for its task, the record. Released untimed. One untimed warm-up
acquire per relay first (it copies the derived image to the worker).

    sudo bench/machine-docker/swarm.py        (BINARY=build/mcp-relay, ROUNDS=10)
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from relay_client import Relay  # noqa: E402
from docker_support import structured  # noqa: E402
from swarm_support import Swarm  # noqa: E402

BINARY = os.environ.get("BINARY") or os.path.join(REPO, "build", "mcp-relay")
ROUNDS = int(os.environ.get("ROUNDS") or "10")


def relay(sw, image, role):
    opts = {"endpoint": sw.nodes[0].endpoint, "images": {"bench": image}, "display": "off",
            "nodes": {n.name: {"endpoint": n.endpoint} for n in sw.nodes},
            "placement": {"constraints": ["node.role==%s" % role]}}
    r = Relay(BINARY, env={"MCP_RELAY_BACKEND": "docker", "MCP_RELAY_DOCKER_OPTIONS": json.dumps(opts)})
    r.__enter__()
    r.initialize()
    return r


def acquire_ms(r, sw, role, i):
    t0 = time.monotonic()
    res = r.call_tool("relay_acquire", {"task": "%s%d" % (role, i), "image": "bench", "extractions": []},
                      timeout=300)
    ms = (time.monotonic() - t0) * 1000
    assert res["isError"] is False, res
    a = structured(res)
    node = sw.node_of(sw.tasks(a["vm"])[0]["NodeID"])
    assert node.role == role, (node.name, role)
    rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
    assert rel["isError"] is False, rel
    return ms


def main():
    if os.geteuid() != 0:
        print("swarm.py: run as root (the dockerd fixture is rootful)", file=sys.stderr)
        return 2
    with Swarm(managers=1, workers=1) as sw:
        image = sw.load_image("minimal")
        relays = {role: relay(sw, image, role) for role in ("manager", "worker")}
        try:
            for role, r in relays.items():
                print("warm-up on the %s: %.1f ms" % (role, acquire_ms(r, sw, role, 0)))
            samples = {"manager": [], "worker": []}
            for i in range(ROUNDS):
                order = ("manager", "worker") if i % 2 == 0 else ("worker", "manager")
                for role in order:
                    samples[role].append(acquire_ms(relays[role], sw, role, i + 1))
            with open("/proc/loadavg") as f:
                load = f.read().split()[:3]
            for role in ("manager", "worker"):
                print("%s acquire->ready samples (ms): %s" % (role, " ".join("%.1f" % s for s in samples[role])))
            med = {role: statistics.median(v) for role, v in samples.items()}
            print("median manager %.1f ms, worker %.1f ms, ratio worker/manager %.2fx (target <= 1.3x); "
                  "load average %s" % (med["manager"], med["worker"], med["worker"] / med["manager"], " ".join(load)))
        finally:
            for r in relays.values():
                r.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
