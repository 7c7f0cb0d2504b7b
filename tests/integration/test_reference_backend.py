#!/usr/bin/env python3
"""The reference machine + transport plugin (plugins/reference-machine/, docs/writing-a-plugin.md
"A backend in an afternoon") through the real binary: chosen with MCP_RELAY_BACKEND and with an
environment profile's relayPlugins slot, it acquires a guest (a folder of this host), stages a
workspace and the receiver, runs a recorded script, extracts its output, and relay_finish
delivers a package `mcp-relay review` verifies and removes the guest folder and its guest root.
`mcp-relay doctor` with a machine plugin that is no transport fails on the empty transport
slot, naming it and the fix."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, skip  # noqa: E402
from support_common import build_dir, plugin_so, structured, text_of  # noqa: E402


def reference(binary):
    path = plugin_so(binary, "reference-machine")
    if not os.path.exists(path):
        skip("reference-machine.so is not built (%s)" % path)
    return path


def write_profile(root, plugins):
    """An environment profile (spec/lifecycle.md §14) whose relayPlugins choose the plugins."""
    repo = os.path.join(root, "repo")
    os.makedirs(os.path.join(repo, "images"))
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir)
    for name in ("machctl", "tart"):
        with open(os.path.join(bindir, name), "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(os.path.join(bindir, name), 0o755)
    env = os.path.join(root, "env")
    profile = {"schemaVersion": 2, "id": "reference", "vmServiceUrl": "http://127.0.0.1:6299",
               "imageRepository": repo, "tartHome": os.path.join(env, "tart"),
               "serviceStateDir": os.path.join(env, "service"), "imageStateDir": os.path.join(env, "images"),
               "relayStateDir": os.path.join(env, "relay"), "machctlPath": os.path.join(bindir, "machctl"),
               "tartPath": os.path.join(bindir, "tart"), "relayPlugins": plugins}
    path = os.path.join(root, "profile.json")
    with open(path, "w") as f:
        json.dump(profile, f)
    return path


def loop(binary, env, state_root=None):
    with Relay(binary, env=env) as r:
        r.initialize()
        ws = os.path.join(r.project, "ws")
        os.makedirs(os.path.join(ws, "sub"))
        with open(os.path.join(ws, "input.txt"), "w") as f:
            f.write("from the host workspace\n")
        with open(os.path.join(ws, "sub", "data.bin"), "wb") as f:
            f.write(bytes(range(256)) * 16)
        acq = r.call_tool("relay_acquire", {"task": "reference", "image": "folder",
                                            "extractions": [{"name": "report", "path": "out/report.txt"}]},
                          timeout=120)
        assert acq["isError"] is False, text_of(acq)
        g, root, evidence = structured(acq)["guest"], structured(acq)["guestRoot"], structured(acq)["evidencePath"]
        vm = structured(acq)["vm"]
        assert vm.startswith("ref-"), structured(acq)
        st = r.call_tool("relay_stage", {"guest": g, "workspace": "ws"}, timeout=300)
        assert st["isError"] is False, text_of(st)
        assert os.path.isfile(os.path.join(root, "receiver")), root
        with open(os.path.join(root, "workspace", "sub", "data.bin"), "rb") as f:
            assert f.read() == bytes(range(256)) * 16
        run = r.call_tool("relay_script", {"guest": g, "language": "shell", "inline": True,
                                           "code": "mkdir -p out && cp input.txt out/report.txt && echo copied",
                                           "reason": "copy the input into the report"}, timeout=180)
        assert run["isError"] is False, text_of(run)
        assert structured(run)["outcome"]["exitStatus"]["code"] == 0, structured(run)
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is False, text_of(fin)
        s = structured(fin)
        assert s["delivered"] is True and s["deliveryVerified"] is True, s
        assert s["released"] is True and s["destructionVerified"] is True, s
        assert s["execution"] == "passed", s
        assert [e["name"] for e in s["extractions"]] == ["report"], s
        report = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(evidence, "extractions", "report"))
                  for f in fs]
        with open(report[0]) as f:
            assert f.read() == "from the host workspace\n"
        # Release removed the guest folder and the guest root (relay/transport.h).
        assert not os.path.exists(root), root
        guests = os.path.join(state_root or r.state_dir, "plugins", "reference-machine", "guests")
        assert os.path.isdir(guests) and vm not in os.listdir(guests), os.listdir(guests)
        review = subprocess.run([binary, "review", evidence], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, timeout=120)
        assert review.returncode == 0, (review.stdout, review.stderr)


def test_loop_with_mcp_relay_backend(binary):
    loop(binary, {"MCP_RELAY_BACKEND": reference(binary)})


def test_loop_with_a_profile_slot(binary):
    path = reference(binary)
    root = tempfile.mkdtemp(prefix="relay-reference-profile-")
    profile = write_profile(root, {"machine": path, "transport": path})
    loop(binary, {"VM_ENVIRONMENT_FILE": profile, "MCP_RELAY_BACKEND": None}, os.path.join(root, "env", "relay"))


def test_doctor_fails_on_an_empty_transport_slot(binary):
    machine_only = os.path.join(build_dir(binary), "tests", "abi", "abi-good.so")
    if not os.path.exists(machine_only):
        skip("tests/abi/abi-good.so is not built")
    state = tempfile.mkdtemp(prefix="relay-doctor-empty-")
    e = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RELAY_")}
    e.pop("VM_ENVIRONMENT_FILE", None)
    e.update({"MCP_RELAY_BACKEND": machine_only, "MCP_RELAY_STATE_DIR": state, "MCP_RELAY_PROJECT": state})
    p = subprocess.run([binary, "doctor"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    assert p.returncode == 1, (p.returncode, p.stdout)
    lines = p.stdout.splitlines()
    bad = [i for i, ln in enumerate(lines) if ln.startswith("FAIL transport plugin")]
    assert bad, p.stdout
    assert "empty, and machine plugin abi-good provides no transport" in lines[bad[0]], lines[bad[0]]
    assert lines[bad[0] + 1].strip().startswith("fix: name a transport in the environment profile "
                                                "(relayPlugins.transport"), p.stdout
    assert "Ready." not in p.stdout and lines[-1] == "Some checks failed.", p.stdout
    # The reference plugin is its own transport: that slot is fine.
    e["MCP_RELAY_BACKEND"] = plugin_so(binary, "reference-machine")
    p = subprocess.run([binary, "doctor"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    assert "FAIL transport plugin" not in p.stdout and "ok   transport plugin" in p.stdout, p.stdout


if __name__ == "__main__":
    run_tests(globals())
