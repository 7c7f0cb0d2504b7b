#!/usr/bin/env python3
"""machine-docker end to end through the real binary against a real engine (docker_support.py:
Podman's Docker-compatible API service started by the test): relay_probe lists the configured
images with what each contains; acquire creates a labelled, isolated container; stage pushes
the receiver and a workspace through the archive API; relay_script runs in the shell, bash and
Python with snapshots from the guest's own Xvfb display (capture-x11); relay_extract pulls a
file and a folder; relay_finish delivers the package and removes the container with its
volumes, verified at the engine. A minimal image (a shell and coreutils only) says "snapshots
off" and refuses Python honestly."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import (Engine, acquire, engines, diag, plugin_missing, sh, store_of, structured,  # noqa: E402
                            text_of, sha256_hex)

EXTRACTIONS = [{"name": "report", "path": "out/report.txt"}, {"name": "tree", "path": "out/tree"}]


def run(r, guest, code, language="shell", **extra):
    args = {"guest": guest, "language": language, "inline": True, "code": code}
    args.update(extra)
    return r.call_tool("relay_script", args, timeout=180)


def labels_of(info):
    return {k[len("io.mcp-relay."):]: v for k, v in info["Config"]["Labels"].items()
            if k.startswith("io.mcp-relay.")}


def test_full_loop(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    # On Podman and on dockerd (which the fixture runs in a mount namespace of its own: in this
    # host's, other processes' namespaces could take its view of the guest's files away —
    # docs/machine-docker.md, "Known problems"; test_docker_mounts.py).
    for eng in engines():
        images = {"full": eng.image("full"), "minimal": eng.image("minimal")}
        with eng.relay(binary, images, MCP_RELAY_SESSION="docker-loop") as r:
            r.initialize()
            probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
            listed = json.dumps(probe)
            for key, ref in images.items():
                assert key in listed and ref in listed, probe
            # relay_probe says what each image contains; relay_search finds it by name.
            inv = probe.get("backend", probe)
            text = json.dumps(inv)
            assert "on: Xvfb in the image" in text and "off: the image has no Xvfb" in text, inv
            found = structured(r.call_tool("relay_search", {"name": "Xvfb"}, timeout=120))
            assert any(a["name"] == "Xvfb" and [i["image"] for i in a["installations"]] == ["full"]
                       for a in found["applications"]), found
            found = structured(r.call_tool("relay_search", {"name": "Python 3"}, timeout=120))
            assert found["applications"], found
            acq = acquire(r, "full", extractions=EXTRACTIONS)
            g, vm = acq["guest"], acq["vm"]

            # The container: labels, and the isolation the plugin promises.
            info = eng.inspect(vm)
            assert info is not None and info["State"]["Running"], info
            labels = labels_of(info)
            assert labels["purpose"] == acq["purpose"] and labels["guest"] == g, labels
            assert labels["lease-id"] == acq["lease_id"] and labels["session"] == "docker-loop", labels
            assert labels["store"] == store_of(r) and labels["plugin"] == "machine-docker", labels
            assert int(labels["deadline-ms"]) > 0 and labels["owner"].count(":") >= 2, labels
            hc = info["HostConfig"]
            assert hc["NetworkMode"] == "none", hc["NetworkMode"]
            assert any("no-new-privileges" in o for o in hc["SecurityOpt"] or []), hc["SecurityOpt"]
            assert hc["PidsLimit"] > 0 and hc["Memory"] > 0 and hc["NanoCpus"] > 0, hc
            assert not hc.get("Binds") and not info.get("Mounts"), (hc.get("Binds"), info.get("Mounts"))
            assert info["Config"]["User"] == "61000:61000", info["Config"]["User"]
            # The creation intent became a running record before the tool answered.
            with open(os.path.join(store_of(r), "leases", vm + ".json")) as f:
                rec = json.load(f)
            assert rec["state"] == "running" and rec["lease_id"] == acq["lease_id"], rec

            # Stage with a workspace; snapshots on (Xvfb in the image, the guest's own :0).
            ws = os.path.join(r.project, "ws")
            os.makedirs(os.path.join(ws, "sub"))
            with open(os.path.join(ws, "input.txt"), "w") as f:
                f.write("from the host workspace\n")
            with open(os.path.join(ws, "sub", "data.bin"), "wb") as f:
                f.write(bytes(range(256)) * 300)
            st = r.call_tool("relay_stage", {"guest": g, "workspace": "ws"}, timeout=300)
            assert st["isError"] is False, text_of(st)
            caps = structured(st)["capabilities"]
            assert caps["snapshots"]["enabled"] is True, caps
            out = sh(r, g, "id -u; cat input.txt; sha256sum sub/data.bin; echo $DISPLAY; ls /tmp/.X11-unix")
            lines = out.split("\n")
            # Inside: no capability at all, even in the bounding set, and no new privileges.
            status = dict(line.split(":\t", 1) for line in sh(r, g, "cat /proc/self/status").splitlines()
                          if ":\t" in line)
            for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert int(status[key].strip(), 16) == 0, (key, status[key])
            assert status["NoNewPrivs"].strip() == "1", status["NoNewPrivs"]
            assert lines[0] == "61000" and lines[1] == "from the host workspace", out
            assert lines[2].split()[0] == sha256_hex(bytes(range(256)) * 300), out
            assert "X0" in out, out

            # Runs: the shell, bash, Python; each recorded with its receipt.
            res = run(r, g, "mkdir -p out/tree/sub && cp input.txt out/report.txt && echo one > out/tree/one.txt "
                            "&& echo \"shell $RELAY_STEP_ID\"")
            s = structured(res)
            assert res["isError"] is False and s["outcome"]["kind"] == "completed", text_of(res)
            assert s["stdout"] == "shell shell-1\n", s
            assert s["imageDelivery"]["status"] in ("pending", "attached"), s["imageDelivery"]
            res = run(r, g, "bash -c 'echo two > out/tree/sub/two.txt; echo bash ${BASH_VERSINFO[0]}'")
            assert structured(res)["stdout"].startswith("bash "), text_of(res)
            res = run(r, g, "import os, sys\nprint('python', sys.version_info[0], os.getuid())", language="python")
            assert res["isError"] is False and structured(res)["stdout"] == "python 3 61000\n", text_of(res)
            res = run(r, g, "echo failing >&2; exit 3")
            s = structured(res)
            assert s["outcome"] == {"kind": "completed", "exitStatus": {"code": 3, "signal": None}}, s
            assert "failing" in s["stderr"], s

            # Extract a file and a folder (SHA-256 checked by the relay).
            x = r.call_tool("relay_extract", {"guest": g, "names": ["report", "tree"]}, timeout=120)
            assert x["isError"] is False, text_of(x)
            got = {e["name"]: e for e in structured(x)["extractions"]}
            with open(os.path.join(got["report"]["destination"], "report.txt")) as f:
                assert f.read() == "from the host workspace\n"
            assert [f["path"] for f in got["tree"]["facts"]] == ["one.txt", "sub/two.txt"], got["tree"]

            # Finish: the package is delivered and the container is gone, with its volumes.
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            f = structured(fin)
            assert f["delivered"] is True and f["deliveryVerified"] is True, f
            assert f["destructionVerified"] is True, f
            assert f["snapshots"] == "complete", f
            assert eng.inspect(vm) is None, "the container survived relay_finish"
            assert eng.containers(purpose=acq["purpose"]) == [], eng.containers(purpose=acq["purpose"])
            assert not os.path.exists(os.path.join(store_of(r), "leases", vm + ".json"))
            assert os.path.exists(os.path.join(acq["evidencePath"] + ".delivered")) or \
                f.get("manifestPath"), f


def test_minimal_image_is_honest(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        images = {"minimal": eng.image("minimal"), "absent": "localhost/mcp-relay-test-absent:none"}
        with eng.relay(binary, images) as r:
            r.initialize()
            # An image the engine does not have (and no registry here to pull it from): the engine
            # is asked to pull it and refuses, with its reason; nothing left.
            bad = r.call_tool("relay_acquire", {"task": "x", "image": "absent", "extractions": []}, timeout=300)
            assert bad["isError"] and "absent" in text_of(bad) and "cannot be pulled" in text_of(bad), text_of(bad)
            assert eng.containers(store=store_of(r)) == []
            assert os.listdir(os.path.join(store_of(r), "leases")) == [], "an intent was left behind"
            acq = acquire(r, "minimal")
            g = acq["guest"]
            st = r.call_tool("relay_stage", {"guest": g}, timeout=300)
            assert st["isError"] is False, text_of(st)
            snap = structured(st)["capabilities"]["snapshots"]
            assert snap["enabled"] is False and "no X display" in json.dumps(snap), snap
            probe = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": g}, timeout=120))
            assert probe["runtimes"]["shell"]["ready"] is True, probe["runtimes"]
            assert probe["runtimes"]["python"]["ready"] is False, probe["runtimes"]
            res = run(r, g, "print(1)", language="python")
            assert structured(res)["outcome"]["kind"] == "refused", text_of(res)
            # Unknown images are refused with the reason.
            bad = r.call_tool("relay_acquire", {"task": "x", "image": "nope", "extractions": []}, timeout=60)
            assert bad["isError"] and "nope is not offered" in text_of(bad) and "minimal" in text_of(bad), text_of(bad)
            rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
            assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            assert eng.inspect(acq["vm"]) is None
        # network "internet" and "allow" on this (local) engine serve the relay's egress proxy:
        # test_egress_docker.py.


if __name__ == "__main__":
    run_tests(globals())
