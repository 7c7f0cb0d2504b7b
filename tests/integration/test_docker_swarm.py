#!/usr/bin/env python3
"""machine-docker with a Swarm manager as the endpoint: a dockerd of the test's own
(docker_support.py) made a single-node Swarm (`docker swarm init` on 127.0.0.1). A lease is
then a one-replica service the manager places, on an internal overlay network of its own (no
route out); exec and copy go to the task's container on the node's engine. The round trip —
acquire, stage, runs, release with the service, its container and its network verified gone —
and the guest's isolation (no route to this host, no capabilities, no new privileges)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, free_port, plugin_missing, sh, structured, text_of  # noqa: E402


def test_swarm_service_lease(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine("docker") as eng:
        port = free_port()
        init = subprocess.run(eng.cli + ["swarm", "init", "--advertise-addr", "127.0.0.1:%d" % port,
                                         "--listen-addr", "127.0.0.1:%d" % port], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        if init.returncode != 0:
            skip("dockerd here cannot start a Swarm: %s" % init.stderr.strip())
        img = eng.image("full")
        with eng.relay(binary, {"full": img}) as r:
            r.initialize()
            acq = acquire(r, "full")
            g, vm = acq["guest"], acq["vm"]
            code, svc = eng.api("GET", "/services/" + vm)
            assert code == 200 and svc["Spec"]["Mode"]["Replicated"]["Replicas"] == 1, (code, svc)
            labels = svc["Spec"]["Labels"]
            assert labels["io.mcp-relay.lease-id"] == acq["lease_id"] and labels["io.mcp-relay.mode"] == "service"
            code, net = eng.api("GET", "/networks/%s-net" % vm)
            assert code == 200 and net["Internal"] is True and net["Driver"] == "overlay", (code, net)
            tasks = eng.containers(lease_id=acq["lease_id"])
            assert len(tasks) == 1 and tasks[0]["Labels"]["com.docker.swarm.service.name"] == vm, tasks

            st = r.call_tool("relay_stage", {"guest": g}, timeout=300)
            assert st["isError"] is False, text_of(st)
            assert structured(st)["capabilities"]["snapshots"]["enabled"] is True, structured(st)["capabilities"]
            res = r.call_tool("relay_script", {"guest": g, "language": "python", "inline": True,
                                               "code": "import os\nprint('swarm', os.getuid())"}, timeout=120)
            assert structured(res)["stdout"] == "swarm 61000\n", text_of(res)
            # No route out: the task network is internal; no capability; no new privileges.
            out = sh(r, g, "cat /proc/net/route; if bash -c 'echo > /dev/tcp/127.0.0.1/22' 2>/dev/null; "
                           "then echo reached; else echo refused; fi; cat /proc/self/status")
            routes = [ln.split() for ln in out.splitlines() if ln.startswith("eth")]
            assert routes and all(rt[1] != "00000000" for rt in routes), out  # no default route
            assert "refused" in out and "reached" not in out, out
            status = dict(ln.split(":\t", 1) for ln in out.splitlines() if ":\t" in ln)
            assert int(status["CapEff"].strip(), 16) == 0 and int(status["CapBnd"].strip(), 16) == 0, status
            assert status["NoNewPrivs"].strip() == "1", status["NoNewPrivs"]

            rel = r.call_tool("relay_release", {"guest": g}, timeout=300)
            assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            assert eng.api("GET", "/services/" + vm)[0] == 404
            assert eng.api("GET", "/networks/%s-net" % vm)[0] == 404
            assert eng.containers(lease_id=acq["lease_id"]) == []


if __name__ == "__main__":
    run_tests(globals())
