#!/usr/bin/env python3
"""machine-docker's display and its environment (issue 22, defects 2 and 7).

- A guest of an image with Xvfb gets DISPLAY=:0 in every command's environment (the contract
  machine-local keeps: a lease with a display means DISPLAY is set), and LANG=C.UTF-8. Before,
  only HOME and MCP_RELAY_GUEST were set, so `xclock &` "passed" with black images and xdotool
  said "Can't open display: (null)".
- With options.display "off", or an image whose package list names an X server while it has no
  Xvfb, the lease says "display": false, relay_probe says snapshots off and relay_stage stages at
  once. Before, capture-x11 fell back to ":0" because the image lists dpkg:xvfb, and the stage
  waited ~116 s for a screenshot of a display that does not exist and failed
  capture-unavailable.

The images with a package list are the test images with this host's own dpkg stanza of xvfb
added (`podman build` from the local image; no registry).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, sh, structured, text_of  # noqa: E402

STAGE_TIMEOUT_S = 90  # well under the ~116 s the stage used to wait


def xvfb_stanza():
    with open("/var/lib/dpkg/status") as f:
        text = f.read()
    for block in text.split("\n\n"):
        if block.startswith("Package: xvfb\n"):
            return block + "\n\n"
    skip("this host's dpkg lists no xvfb package (apt-get install xvfb)")


def with_package_list(eng, base, tag):
    """`base` with /var/lib/dpkg/status naming xvfb (a real stanza of this host)."""
    if subprocess.run(eng.cli + ["image", "inspect", tag], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return tag
    d = tempfile.mkdtemp(prefix="relay-docker-display-")
    with open(os.path.join(d, "status"), "w") as f:
        f.write(xvfb_stanza())
    with open(os.path.join(d, "Containerfile"), "w") as f:
        f.write("FROM %s\nCOPY status /var/lib/dpkg/status\n" % base)
    p = subprocess.run(eng.cli + ["build", "--pull=never", "-t", tag, d], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return tag


def probe(r, guest):
    res = r.call_tool("relay_probe", {"scope": "guest", "guest": guest}, timeout=120)
    assert res["isError"] is False, text_of(res)
    return structured(res)


def lease_display(r, guest):
    for g in structured(r.call_tool("relay_status"))["guests"]:
        if g["guest"] == guest:
            return g
    raise AssertionError(guest)


def setup(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)


def test_display_env_with_xvfb(binary):
    setup(binary)
    with Engine() as eng:
        full = eng.image("full")
        with eng.relay(binary, {"full": full}) as r:
            r.initialize()
            g = acquire(r, "full")
            res = r.call_tool("relay_stage", {"guest": g["guest"]}, timeout=300)
            assert res["isError"] is False, text_of(res)
            out = sh(r, g["guest"], "echo \"display=$DISPLAY lang=$LANG\"; ls /tmp/.X11-unix")
            assert "display=:0 lang=C.UTF-8" in str(out), out
            assert "X0" in str(out), out


def check_no_display(r, guest):
    p = probe(r, guest)
    assert p["snapshots"]["enabled"] is False, p["snapshots"]
    assert "no X display" in p["snapshots"]["reason"], p["snapshots"]
    t0 = time.monotonic()
    res = r.call_tool("relay_stage", {"guest": guest}, timeout=STAGE_TIMEOUT_S)
    took = time.monotonic() - t0
    assert res["isError"] is False, text_of(res)
    assert "; snapshots off (" in text_of(res).split("\n")[0], text_of(res)
    out = sh(r, guest, "echo \"display=${DISPLAY-unset}\"")
    assert "display=unset" in str(out), out
    return took


def test_display_off_stages_at_once(binary):
    setup(binary)
    with Engine() as eng:
        img = with_package_list(eng, eng.image("full"), "localhost/mcp-relay-test-full-dpkg:" +
                                eng.image("full").rsplit(":", 1)[1])
        with eng.relay(binary, {"full": img}, extra_options={"display": "off"}) as r:
            r.initialize()
            g = acquire(r, "full")
            took = check_no_display(r, g["guest"])
            print("  stage with the display off: %.1f s" % took)


def test_x_server_listed_but_no_xvfb(binary):
    setup(binary)
    with Engine() as eng:
        img = with_package_list(eng, eng.image("minimal"), "localhost/mcp-relay-test-minimal-dpkg:" +
                                eng.image("minimal").rsplit(":", 1)[1])
        with eng.relay(binary, {"minimal": img}) as r:
            r.initialize()
            g = acquire(r, "minimal")
            took = check_no_display(r, g["guest"])
            print("  stage with no Xvfb: %.1f s" % took)


if __name__ == "__main__":
    run_tests(globals())
