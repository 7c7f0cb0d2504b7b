#!/usr/bin/env python3
"""machine-docker under MCP_RELAY_GUEST_NETWORK=allow and internet, on a real Podman
(docker_support.Engine; issue 23): machine-docker has no egress_listeners yet, so the relay
refuses both at acquire with the reason and the way on (docs/egress.md), before any engine
call and without falling back to nat: no container is created."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, plugin_missing, structured, text_of  # noqa: E402


def test_allow_and_internet_are_refused_with_the_reason(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        img = eng.image("minimal")
        for network in ("allow", "internet"):
            with eng.relay(binary, images={"minimal": img}, MCP_RELAY_GUEST_NETWORK=network,
                           MCP_RELAY_EGRESS_ALLOW="allowed.test") as r:
                r.initialize()
                res = r.call_tool("relay_acquire", {"task": "egress", "image": "minimal", "extractions": []},
                                  timeout=300)
                text = text_of(res)
                assert res["isError"] is True, text
                assert ("the machine plugin machine-docker cannot give a guest network %s (it has no "
                        "egress_listeners, ABI 1.3)" % network) in text, text
                assert structured(res)["error"]["code"] == "backend-refused", structured(res)
        out = subprocess.run(["podman", "--url", eng.endpoint, "ps", "-a", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if out.returncode == 0:
            assert not [c for c in json.loads(out.stdout or "[]") if "egress" in json.dumps(c)], out.stdout


if __name__ == "__main__":
    run_tests(globals())
