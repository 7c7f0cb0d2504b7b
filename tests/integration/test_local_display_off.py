#!/usr/bin/env python3
"""machine-local with MCP_RELAY_LOCAL_OPTIONS='{"display":"off"}' (issue 14 point 10): no X
server runs in the guest, so the image catalog offers none, relay_probe scope guest says
"snapshots off", and relay_stage stages without waiting for a test screenshot from a display
that does not exist (it used to wait 115 s, then fail its snapshot check). With the display on
(the default, where Xvfb is installed) the same image has snapshots on."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import make_variant, stage, structured, text_of  # noqa: E402

# Well under the 115 s the stage used to wait for a screenshot: a stage still waiting fails.
STAGE_TIMEOUT_S = 90


def local_variant(binary):
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    return v


def probe_guest(r, name):
    res = r.call_tool("relay_probe", {"scope": "guest", "guest": name}, timeout=120)
    assert res["isError"] is False, text_of(res)
    return res


def test_display_off_means_snapshots_off_and_no_wait(binary):
    v = local_variant(binary)
    try:
        v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps({"display": "off"})
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            res = probe_guest(r, g["guest"])
            p = structured(res)
            assert p["snapshots"]["enabled"] is False, p["snapshots"]
            assert text_of(res).split("\n")[0].endswith("snapshots off"), text_of(res)
            assert "lists neither dpkg:xvfb nor dpkg:xserver-xorg-core" in p["snapshots"]["reason"], p["snapshots"]
            res = r.call_tool("relay_stage", {"guest": g["guest"]}, timeout=STAGE_TIMEOUT_S)
            assert res["isError"] is False, text_of(res)
            head = text_of(res).split("\n")[0]
            assert "; snapshots off (" in head, head
            assert structured(res)["capabilities"]["snapshots"]["enabled"] is False, structured(res)
            assert "no test screenshot" not in text_of(res), text_of(res)
    finally:
        v.cleanup()


def test_display_on_keeps_snapshots(binary):
    if not shutil.which("Xvfb"):
        skip("Xvfb is not installed here (apt-get install xvfb): no display to compare with")
    v = local_variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            p = structured(probe_guest(r, g["guest"]))
            assert p["snapshots"]["enabled"] is True, p["snapshots"]
            res = stage(r, g["guest"])
            assert res["isError"] is False, text_of(res)
            assert "; snapshots on" in text_of(res).split("\n")[0], text_of(res)
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
