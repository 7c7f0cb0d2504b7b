"""The selected environment profile (VM_ENVIRONMENT_FILE) through the real mcp-relay binary
against the real stand-in started with the same ten values: a version-2 profile binds the
service, the state folder and the fingerprint header; a version-1 profile, one naming vmctlPath,
a blank selection and an invalid profile stop the server with exit status 2 and the fix, never
falling back to the unselected settings; `mcp-relay doctor` reports each check with its fix and
acquires nothing."""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import Relay, run_tests  # noqa: E402
from service_support import Standin, plugin_dir, structured, text  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Env:
    """An environment laid out under a fresh folder: repository, tart and machctl stand-ins, the
    three state folders, the plain profile (for the service) and the relay's copy."""

    def __init__(self, name="it-env", port=None, plugins=None):
        self.root = tempfile.mkdtemp(prefix="relay-env-")
        self.home = os.path.join(self.root, "home")
        os.makedirs(self.home)
        base = os.path.join(self.root, "env")
        os.makedirs(os.path.join(base, "repo", "images"))
        os.makedirs(os.path.join(base, "bin"))
        for tool, body in (("tart", "echo '[]'"), ("machctl", "exit 0")):
            p = os.path.join(base, "bin", tool)
            with open(p, "w") as f:
                f.write("#!/bin/sh\n%s\n" % body)
            os.chmod(p, 0o755)
        self.port = port or free_port()
        self.values = {
            "schemaVersion": 2, "id": name, "vmServiceUrl": "http://127.0.0.1:%d" % self.port,
            "imageRepository": os.path.join(base, "repo"), "tartHome": os.path.join(base, "state", "tart"),
            "serviceStateDir": os.path.join(base, "state", "service"),
            "imageStateDir": os.path.join(base, "state", "images"),
            "relayStateDir": os.path.join(base, "state", "relay"),
            "machctlPath": os.path.join(base, "bin", "machctl"), "tartPath": os.path.join(base, "bin", "tart"),
        }
        self.plain = self.write("profile.json", self.values)
        relay_copy = dict(self.values)
        if plugins:
            relay_copy["relayPlugins"] = plugins
        self.relay_profile = self.write("relay-profile.json", relay_copy)

    def write(self, name, obj, raw=None):
        p = os.path.join(self.root, name)
        with open(p, "w") as f:
            f.write(raw if raw is not None else json.dumps(obj, indent=2))
        return p

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


def relay_env(env, binary, **extra):
    e = {
        "VM_ENVIRONMENT_FILE": env.relay_profile,
        "MCP_RELAY_PLUGIN_PATH": plugin_dir(binary),
        "MCP_RELAY_BACKEND": "local",  # ignored: the profile chooses the plugins
        "HOME": env.home,
        "XDG_STATE_HOME": None,
        "MCP_RELAY_STATE_DIR": None,
    }
    e.update(extra)
    return e


def expect_stop(binary, env_vars, *fragments):
    # An invalid selection is answered, not hidden (spec/lifecycle.md §14, changed 2026-12-01): every
    # call names it, nothing is acquired, and the server exits 2 when stdin closes.
    r = Relay(binary, env=env_vars)
    try:
        r.initialize()
        res = r.call_tool("relay_status")
        assert res["isError"] is True and "VM_ENVIRONMENT_FILE is invalid" in res["content"][0]["text"], res
        r.close_stdin()
        status = r.wait(timeout=20)
        assert status == 2, "exit status %r: %s" % (status, r.stderr_text())
        err = r.stderr_text()
        for fragment in fragments:
            assert fragment in err, err
    finally:
        r.close()


def test_a_version_2_profile_binds_the_service(binary):
    env = Env()
    svc = Standin(binary, ["--profile", env.plain])
    try:
        assert svc.url == env.values["vmServiceUrl"]
        with Relay(binary, env=relay_env(env, binary)) as r:
            r.initialize()
            status = structured(r.call_tool("relay_status"))
            assert status["environment"]["id"] == "it-env"
            fp = status["environment"]["fingerprint"]
            assert status["backend"]["machine"] == "machine-service"
            # The state folder is the profile's relayStateDir.
            assert status["stateDirectory"].startswith(os.path.realpath(env.values["relayStateDir"]))
            probe = structured(r.call_tool("relay_probe", {}))
            code, health = svc.http("GET", "/health")
            assert probe["environment"] == health["environment"], (probe["environment"], health)
            assert probe["backend"]["reachable"] is True
            res = r.call_tool("relay_acquire", {"task": "env", "image": "ubuntu2404", "extractions": []})
            assert res["isError"] is False, text(res)
            vm = structured(res)["vm"]
            assert svc.machines()[vm]["environment_fingerprint"] == fp
            # Every request carried the fingerprint header.
            reqs = [e for e in svc.requests() if "urllib" not in e["headers"].get("user-agent", "")]
            assert reqs and all(e["headers"].get("x-vm-environment-fingerprint") == fp for e in reqs)
            records = glob.glob(os.path.join(env.values["relayStateDir"], "*", "guests", "env-1", "lease.json"))
            with open(records[0]) as f:
                binding = json.load(f)["binding"]
            assert binding["environmentFingerprint"] == fp
            assert binding["store"] == os.path.realpath(os.path.dirname(env.values["tartHome"])) + "/tart"
            rel = r.call_tool("relay_release", {"guest": "env-1"})
            assert rel["isError"] is False, text(rel)
            assert vm not in svc.machines()
    finally:
        svc.cleanup()
        env.cleanup()


def test_a_relay_of_another_environment_is_refused(binary):
    served = Env("served")
    other = Env("other", port=served.port)
    svc = Standin(binary, ["--profile", served.plain])
    try:
        with Relay(binary, env=relay_env(other, binary)) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "x", "image": "ubuntu2404", "extractions": []})
            assert res["isError"] is True
            assert structured(res)["error"]["code"] == "backend-unavailable", text(res)
            assert "serves another environment (served, fingerprint " in text(res)
            assert svc.requests("POST", "/acquire") == []
    finally:
        svc.cleanup()
        served.cleanup()
        other.cleanup()


def test_invalid_selections_stop_the_server(binary):
    env = Env()
    try:
        v1 = dict(env.values)
        v1["schemaVersion"] = 1
        v1["vmctlPath"] = v1.pop("machctlPath")
        path = env.write("v1.json", v1)
        expect_stop(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=path),
                    "mcp-relay: VM_ENVIRONMENT_FILE Environment profile",
                    "is schemaVersion 1; machine-service needs schemaVersion 2. Fix: set \"schemaVersion\": 2 "
                    "and rename \"vmctlPath\" to \"machctlPath\".")
        vm = dict(env.values)
        vm["vmctlPath"] = vm.pop("machctlPath")
        path = env.write("vmctl.json", vm)
        expect_stop(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=path),
                    "has \"vmctlPath\", which machine-service renamed. Fix: rename \"vmctlPath\" to "
                    "\"machctlPath\" and set \"schemaVersion\": 2.")
        expect_stop(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=" "),
                    "mcp-relay: VM_ENVIRONMENT_FILE must not be blank")
        dup = env.write("dup.json", None, raw=json.dumps(env.values)[:-1] + ', "id": "again"}')
        expect_stop(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=dup),
                    "profile must contain exactly the supported schema fields")
        bad_url = dict(env.values, vmServiceUrl="http://example.com:6240")
        path = env.write("url.json", bad_url)
        expect_stop(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=path), "\"vmServiceUrl\"")
        # The relay never fell back: no state was written under the default roots.
        assert not os.path.exists(os.path.join(env.home, ".local", "state", "mcp-relay"))
    finally:
        env.cleanup()


def run_doctor(binary, env_vars):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("MCP_RELAY_", "MCP_VM_RELAY_")) or k == "VM_ENVIRONMENT_FILE":
            del e[k]
    for k, v in env_vars.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    proc = subprocess.run([binary, "doctor"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120, cwd=tempfile.gettempdir())
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def lines_of(out, check):
    return [l for l in out.splitlines() if l[5:].startswith(check)]


def test_doctor(binary):
    env = Env()
    svc = Standin(binary, ["--profile", env.plain])
    try:
        # machctl reads the same environment: it prints the identity the service reports.
        _, health = svc.http("GET", "/health")
        with open(env.values["machctlPath"], "w") as f:
            f.write("#!/bin/sh\n[ \"$1 $2\" = \"environment --json\" ] || exit 64\ncat <<'EOF'\n%s\nEOF\n"
                    % json.dumps({"profile": env.plain, "identity": health["environment"],
                                  "environment": {"VM_ENVIRONMENT_FILE": env.plain}}))
        code, out, err = run_doctor(binary, relay_env(env, binary))
        for check in ("settings", "environment profile", "machine plugin", "service origin", "service reachable",
                      "service identity", "acquisition capabilities", "application catalog", "destruction check",
                      "machctl", "images"):
            found = lines_of(out, check)
            assert found and found[0].startswith("ok  "), (check, out)
        assert "environment it-env" in lines_of(out, "service identity")[0]
        assert "tart:" in lines_of(out, "destruction check")[0]
        # Nothing was acquired.
        assert svc.requests("POST", "/acquire") == []
        assert code in (0, 1), out
        if code == 1:
            # Only plugins that are not built yet may fail, each with its fix.
            failing = [l for l in out.splitlines() if l.startswith("FAIL")]
            assert all("plugin" in l or "receiver" in l for l in failing), out
            assert "fix: " in out
    finally:
        svc.cleanup()
        env.cleanup()
    # The wrong service: identity fails with its fix; nothing else is asked.
    svc = Standin(binary, ["--service-name", "vm-service"])
    try:
        code, out, err = run_doctor(binary, {"MCP_RELAY_BACKEND": "machine-service", "MCP_RELAY_URL": svc.url,
                                             "MCP_RELAY_PLUGIN_PATH": plugin_dir(binary),
                                             "MCP_RELAY_STATE_DIR": tempfile.mkdtemp(prefix="doctor-state-")})
        assert code == 1, out
        ident = lines_of(out, "service identity")
        assert ident and ident[0].startswith("FAIL") and 'answers "vm-service"' in ident[0], out
        assert "fix: " in out.split(ident[0], 1)[1].splitlines()[1]
        assert lines_of(out, "images") == []
    finally:
        svc.cleanup()
    # transfer-ssh installed but refusing its options: the transport line names the option
    # and the variable, and its fix is not "build the plugins".
    svc = Standin(binary, [])
    try:
        code, out, err = run_doctor(binary, {"MCP_RELAY_BACKEND": "machine-service", "MCP_RELAY_URL": svc.url,
                                             "MCP_RELAY_PLUGIN_PATH": plugin_dir(binary),
                                             "MCP_RELAY_STATE_DIR": tempfile.mkdtemp(prefix="doctor-state-"),
                                             "MCP_RELAY_TRANSFER_SSH_OPTIONS": '{"spareSessions":9}'})
        assert code == 1, out
        transport = lines_of(out, "transport plugin")
        assert transport and transport[0].startswith("FAIL"), out
        assert "options.spareSessions must be a whole number from 0 to 8" in transport[0], out
        assert "MCP_RELAY_TRANSFER_SSH_OPTIONS" in transport[0], out
        fix = out.split(transport[0], 1)[1].splitlines()[1]
        assert "installed but refused to start" in fix, out
    finally:
        svc.cleanup()
    # A version-1 profile: the fix, exit status 2.
    env = Env()
    try:
        v1 = dict(env.values, schemaVersion=1)
        path = env.write("v1.json", v1)
        code, out, err = run_doctor(binary, relay_env(env, binary, VM_ENVIRONMENT_FILE=path))
        assert code == 2, out
        assert lines_of(out, "environment profile")[0].startswith("FAIL"), out
        assert "fix: update the profile to schemaVersion 2 with machctlPath" in out
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
