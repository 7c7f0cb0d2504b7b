#!/usr/bin/env python3
"""A bad setting no longer hides behind "failed to connect" (spec/lifecycle.md §14, changed
2026-12-01): the server answers initialize (and server/discover) and tools/list as usual, every
tools/call is an isError result naming the variable, the problem and the fix, the reason is on
stderr once, nothing is acquired or written to the state folder, and the server exits (status
2) when stdin closes; `mcp-relay doctor` reports the same. A plugin refusing its options names
the variable they came from."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402
from support_common import structured, text_of  # noqa: E402

CASES = [
    ("MCP_RELAY_MAX_GUESTS", "abc", "must be a whole number from 1 to 64 (got abc)"),
    ("MCP_RELAY_LOCAL_OPTIONS", '{"display":', "must be a JSON object of machine-local options"),
    ("MCP_RELAY_LOCAL_OPTIONS", '["display", "off"]', "(it is a JSON array)"),
]

SOME_CALLS = [
    ("relay_status", {}),
    ("relay_probe", {}),
    ("relay_acquire", {"task": "demo", "image": "local", "extractions": []}),
    ("relay_release", {"guest": "demo-1"}),
]


def test_the_server_answers_and_every_call_names_the_problem(binary):
    for name, value, problem in CASES:
        with Relay(binary, env={name: value}) as r:
            init = r.initialize()
            assert init["serverInfo"]["name"] == "relay" and init["instructions"], init
            tools = r.request("tools/list")["result"]["tools"]
            assert len(tools) == 14, [t["name"] for t in tools]
            for tool, args in SOME_CALLS:
                res = r.call_tool(tool, args)
                text = text_of(res)
                assert res["isError"] is True, (name, tool, text)
                err = structured(res)["error"]
                assert err["code"] == "invalid-setting", err
                # The variable, the problem and the fix.
                assert "%s is invalid" % name in text and problem in text, text
                assert "Fix: correct the variable named above" in text and "restart the server" in text, text
                assert "mcp-relay doctor" in text, text
            # Nothing was created for a session: no session folder in the state root.
            assert not [e for e in os.listdir(r.state_dir) if len(e) == 32], os.listdir(r.state_dir)
            r.close_stdin()
            assert r.wait(timeout=20) == 2
            lines = [line for line in r.stderr_text().splitlines() if "session ending" not in line]
            # Once, in the "mcp-relay: <NAME> <problem>" form, with the fix.
            assert len(lines) == 1, lines
            assert lines[0].startswith("mcp-relay: %s " % name) and problem in lines[0], lines
            assert "; fix: correct the variable named above" in lines[0], lines


def test_a_modern_client_is_answered_too(binary):
    with Relay(binary, env={"MCP_RELAY_MAX_GUESTS": "abc"}) as r:
        resp = r.request("server/discover", {"_meta": Relay.modern_meta()})
        assert "result" in resp and resp["result"].get("instructions"), resp


def doctor(binary, env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RELAY_")}
    e.update(env)
    return subprocess.run([binary, "doctor"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120, text=True)


def test_doctor_reports_the_same(binary):
    with Relay(binary) as r:  # for its temporary state folder
        for name, value, problem in CASES:
            p = doctor(binary, {name: value, "MCP_RELAY_STATE_DIR": r.state_dir, "MCP_RELAY_PROJECT": r.project})
            assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
            first = p.stdout.splitlines()[0]
            assert first.startswith("FAIL settings") and name in first and problem in first, p.stdout
            assert "fix: correct the variable named above" in p.stdout, p.stdout


def test_a_plugin_refusing_its_options_names_the_variable(binary):
    # The JSON is an object, so the settings accept it; machine-local refuses the key when it
    # loads, and the first call that needs the backend says which variable carries it.
    env = {"MCP_RELAY_BACKEND": "local", "MCP_RELAY_LOCAL_OPTIONS": json.dumps({"bogus": 1})}
    build = os.path.dirname(os.path.abspath(binary))
    if not os.path.exists(os.path.join(build, "lib", "mcp-relay", "plugins", "machine-local.so")):
        print("  machine-local.so is not built; nothing to refuse the option")
        return
    with Relay(binary, env=env) as r:
        r.initialize()
        res = r.call_tool("relay_acquire", {"task": "demo", "image": "local", "extractions": []}, timeout=120)
        text = text_of(res)
        assert res["isError"] is True and structured(res)["error"]["code"] == "backend-unavailable", text
        assert "unknown machine-local option bogus" in text and "MCP_RELAY_LOCAL_OPTIONS" in text, text
        p = doctor(binary, dict(env, MCP_RELAY_STATE_DIR=r.state_dir, MCP_RELAY_PROJECT=r.project))
        assert p.returncode == 1, (p.returncode, p.stdout)
        assert "FAIL machine plugin" in p.stdout and "options come from MCP_RELAY_LOCAL_OPTIONS" in p.stdout, p.stdout


if __name__ == "__main__":
    run_tests(globals())
