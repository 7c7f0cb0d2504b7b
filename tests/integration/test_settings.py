#!/usr/bin/env python3
"""Settings refused at startup (spec/lifecycle.md §14, changed 2026-12-01; spec/mcp.md §13; conformance
checklist item 38): "mcp-relay: <NAME> <problem>" on stderr, initialize answered, every
tools/call an isError naming the variable, exit status 2 when stdin closes (test_bad_settings.py
checks the rest). Valid values start the server."""
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402

HANG_S = 20

INVALID = [
    ("MCP_RELAY_ON_EXIT", "bogus"),
    ("MCP_RELAY_ON_EXIT", ""),
    ("MCP_RELAY_ON_EXIT", "Pause"),
    ("MCP_RELAY_GUEST_NETWORK", "wan"),
    ("MCP_RELAY_CAPACITY_WAIT", "-1"),
    ("MCP_RELAY_CAPACITY_WAIT", "86401"),
    ("MCP_RELAY_CAPACITY_WAIT", "1e3"),
    ("MCP_RELAY_CAPACITY_WAIT", " 10"),
    ("MCP_RELAY_CAPACITY_WAIT", "+5"),
    ("MCP_RELAY_MAX_GUESTS", "0"),
    ("MCP_RELAY_MAX_GUESTS", "65"),
    ("MCP_RELAY_MAX_GUESTS", "four"),
    ("MCP_RELAY_MAX_GUESTS", ""),
    ("MCP_RELAY_SHUTDOWN_GRACE_MS", "3600001"),
    ("MCP_RELAY_SHUTDOWN_GRACE_MS", "1.5"),
    ("MCP_RELAY_SESSION", ""),
    ("MCP_RELAY_SESSION", "-starts-with-dash"),
    ("MCP_RELAY_SESSION", "has space"),
    ("MCP_RELAY_SESSION", "x" * 129),
    ("MCP_RELAY_BACKEND", "nope"),
    ("MCP_RELAY_BACKEND", "relative/plugin.so"),
    ("MCP_RELAY_BACKEND", "/nonexistent/plugin.so"),
    ("MCP_RELAY_URL", "https://localhost:6240"),
    ("MCP_RELAY_URL", "http://example.com:6240"),
    ("MCP_RELAY_URL", "http://localhost:6240/path"),
    ("MCP_RELAY_URL", "http://user@localhost:6240"),
    ("MCP_RELAY_URL", "http://localhost:6240?x=1"),
    ("MCP_RELAY_URL", "http://127.0.0.256"),
    ("MCP_RELAY_URL", "http://localhost:0"),
    ("MCP_RELAY_URL", "http://localhost:65536"),
    ("MCP_RELAY_URL", ""),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", "not json"),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", "[]"),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", '{"nope": 1}'),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", '{"routePrefix": "no-slash"}'),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", '{"maxExecTimeoutS": 0}'),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", '{"destructionCheck": "maybe"}'),
    ("MCP_RELAY_STATE_DIR", "relative/state"),
    ("MCP_RELAY_PROJECT", "/nonexistent/project/folder"),
    ("MCP_RELAY_REGISTRY", "relative.md"),
    ("MCP_RELAY_REGISTRY", "/nonexistent/registry.md"),
    ("VM_ENVIRONMENT_FILE", ""),
    ("VM_ENVIRONMENT_FILE", "/nonexistent/profile.json"),
]

VALID = [
    ("MCP_RELAY_ON_EXIT", "release"),
    ("MCP_RELAY_ON_EXIT", "pause"),
    ("MCP_RELAY_GUEST_NETWORK", "internet"),
    ("MCP_RELAY_CAPACITY_WAIT", "0"),
    ("MCP_RELAY_CAPACITY_WAIT", "86400"),
    ("MCP_RELAY_MAX_GUESTS", "64"),
    ("MCP_RELAY_MAX_GUESTS", "004"),
    ("MCP_RELAY_SHUTDOWN_GRACE_MS", "0"),
    ("MCP_RELAY_SESSION", "ci.run-7:agent@host"),
    ("MCP_RELAY_URL", "http://127.0.0.1:9"),
    ("MCP_RELAY_URL", "http://[::1]:6240/"),
    ("MCP_RELAY_URL", "http://localhost"),
    ("MCP_RELAY_MACHINE_SERVICE_OPTIONS", '{"routePrefix": "/v2", "maxExecTimeoutS": 30}'),
    ("MCP_RELAY_PYTHON", "/no/such/python"),
    ("MCP_RELAY_PROJECT", "${CLAUDE_PROJECT_DIR}"),
    ("MCP_RELAY_BACKEND", "machine-service"),
]


def start_refused(binary, env):
    """Initializes, calls relay_status, closes stdin: (exit status, the call's result, stderr)."""
    with Relay(binary, env=env) as r:
        r.initialize()
        res = r.call_tool("relay_status")
        r.close_stdin()
        status = r.wait(timeout=HANG_S)
        return status, res, r.stderr_text()


def refusal_problems(name, value, status, res, err):
    problems = []
    lines = [line for line in err.splitlines() if line and "session ending" not in line]
    if status != 2:
        problems.append("%s=%r: exit status %r (stderr %r)" % (name, value, status, err))
    text = res["content"][0]["text"]
    if res["isError"] is not True or res["structuredContent"]["error"]["code"] != "invalid-setting":
        problems.append("%s=%r: the call was not refused: %r" % (name, value, text[:300]))
    if ("%s is invalid" % name) not in text or "Fix:" not in text:
        problems.append("%s=%r: the refusal does not name the variable and the fix: %r" % (name, value, text))
    if len(lines) != 1 or not lines[0].startswith("mcp-relay: %s " % name) or "; fix: " not in lines[0]:
        problems.append("%s=%r: stderr %r" % (name, value, err))
    return problems


def test_invalid_settings_stop(binary):
    problems = []
    for name, value in INVALID:
        status, res, err = start_refused(binary, {name: value})
        problems += refusal_problems(name, value, status, res, err)
    assert not problems, "\n".join(problems)


def test_valid_settings_serve(binary):
    problems = []
    for name, value in VALID:
        with Relay(binary, env={name: value}) as r:
            try:
                resp = r.request("ping")
                if resp.get("result") != {}:
                    problems.append("%s=%r: %r" % (name, value, resp))
            except Exception as e:  # noqa: BLE001
                problems.append("%s=%r: %s (stderr %r)" % (name, value, e, r.stderr_text()))
    assert not problems, "\n".join(problems)


def test_state_dir_open_to_others_stops(binary):
    with Relay(binary) as r:
        state = os.path.join(r._own, "open-state")
        os.mkdir(state)
        os.chmod(state, 0o777)
        status, res, err = start_refused(binary, {"MCP_RELAY_STATE_DIR": state})
        problems = refusal_problems("MCP_RELAY_STATE_DIR", state, status, res, err)
        assert not problems, problems
        assert "not be writable by group or others" in res["content"][0]["text"], res


def test_state_dir_created_0700(binary):
    with Relay(binary) as r:
        state = os.path.join(r._own, "new", "state")
        with Relay(binary, env={"MCP_RELAY_STATE_DIR": state}) as r2:
            assert r2.request("ping")["result"] == {}
        mode = stat.S_IMODE(os.stat(state).st_mode)
        assert mode == 0o700, oct(mode)


def test_project_relative_and_placeholder(binary):
    with Relay(binary) as r:
        sub = os.path.join(r.project, "sub")
        os.mkdir(sub)
        with Relay(binary, env={"MCP_RELAY_PROJECT": "sub"}, cwd=r.project) as r2:
            sc = r2.call_tool("relay_status")["structuredContent"]
            assert sc["project"] == os.path.realpath(sub), sc["project"]
        with Relay(binary, env={"MCP_RELAY_PROJECT": "${X}"}, cwd=sub) as r3:
            sc = r3.call_tool("relay_status")["structuredContent"]
            assert sc["project"] == os.path.realpath(sub), sc["project"]


def test_settings_reach_status(binary):
    env = {"MCP_RELAY_ON_EXIT": "release", "MCP_RELAY_GUEST_NETWORK": "internet",
           "MCP_RELAY_CAPACITY_WAIT": "60", "MCP_RELAY_MAX_GUESTS": "2", "MCP_RELAY_SESSION": "it-session"}
    with Relay(binary, env=env) as r:
        sc = r.call_tool("relay_status")["structuredContent"]
        assert sc["onExit"] == "release" and sc["guestNetwork"] == "internet", sc
        assert sc["capacityWaitSeconds"] == 60 and sc["maxGuests"] == 2 and sc["sessionId"] == "it-session"


def test_old_names_get_a_notice(binary):
    with Relay(binary, env={"MCP_VM_RELAY_ON_EXIT": "release"}) as r:
        assert r.request("ping")["result"] == {}
        assert r.call_tool("relay_status")["structuredContent"]["onExit"] == "pause"
        err = r.stderr_text()
        assert "MCP_VM_RELAY_ON_EXIT is no longer read; it was renamed MCP_RELAY_ON_EXIT" in err, err


if __name__ == "__main__":
    run_tests(globals())
