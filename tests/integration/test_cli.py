#!/usr/bin/env python3
"""The command line (spec/mcp.md §14)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402


def run(binary, *args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RELAY_")}
    e.update(env or {})
    return subprocess.run([binary] + list(args), capture_output=True, timeout=60, env=e,
                          stdin=subprocess.DEVNULL)


def test_version(binary):
    out = run(binary, "--version")
    assert out.returncode == 0 and out.stdout.startswith(b"mcp-relay "), out
    with Relay(binary) as r:
        version = r.initialize()["serverInfo"]["version"]
    assert out.stdout.decode().split()[1] == version


def test_help(binary):
    out = run(binary, "--help")
    assert out.returncode == 0 and b"usage: mcp-relay" in out.stdout and out.stderr == b"", out


def test_instructions(binary):
    out = run(binary, "--instructions")
    assert out.returncode == 0, out
    with Relay(binary) as r:
        instructions = r.initialize()["instructions"]
    assert out.stdout.decode() == instructions + "\n"
    # spec/tools.md §4: it names the fourteen tools.
    for name in ["relay_search", "relay_probe", "relay_acquisition_capabilities", "relay_acquire",
                 "relay_stage", "relay_script", "relay_image", "relay_extract", "relay_finish",
                 "relay_release", "relay_console_resolve", "relay_console_open", "relay_console_cancel",
                 "relay_status"]:
        assert name in instructions, name


def test_schema(binary):
    out = run(binary, "--schema")
    assert out.returncode == 0, out
    tools = json.loads(out.stdout)
    assert isinstance(tools, list) and len(tools) == 14
    assert out.stdout.count(b"\n") == 1


def test_informational_flags_read_no_settings(binary):
    # --instructions, --schema, --version and --help read no settings and touch no state.
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state-not-created")
        env = {"MCP_RELAY_ON_EXIT": "bogus", "MCP_RELAY_STATE_DIR": state, "MCP_RELAY_PROJECT": "/nonexistent"}
        for flag in ["--instructions", "--schema", "--version", "--help"]:
            out = run(binary, flag, env=env)
            assert out.returncode == 0, (flag, out)
            assert out.stderr == b"", (flag, out.stderr)
        assert not os.path.exists(state)


def test_bad_usage(binary):
    for args in [["--nope"], ["serve"], ["--version", "extra"], ["--schema", "x"], ["-h"]]:
        out = run(binary, *args)
        assert out.returncode == 2, (args, out)
        assert out.stdout == b"" and b"usage: mcp-relay" in out.stderr, (args, out)


if __name__ == "__main__":
    run_tests(globals())
