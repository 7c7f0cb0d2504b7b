#!/usr/bin/env python3
"""`mcp-relay doctor` with MCP_RELAY_BACKEND=docker against a real engine (docker_support.py):
the endpoint and its API version, rootless or not, the runtimes, the cgroup driver, each
configured image present or missing with its fix — and, without an engine, the endpoint's
failure with its fix; bad options are refused by name when the plugin loads."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, doctor, doctor_line, plugin_missing  # noqa: E402


def test_doctor_facts(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        present = eng.image("minimal")
        started = time.time() - 1
        opts = {"endpoint": eng.endpoint, "images": {"minimal": present, "absent": "localhost/relay-absent:none"}}
        if eng.runtime:
            opts["runtime"] = eng.runtime
        code, out = doctor(binary, opts)
        assert code == 1, out  # the absent image fails
        assert doctor_line(out, "machine plugin")[0].startswith("ok") and "machine-docker" in out, out
        ep = doctor_line(out, "endpoint")[0]
        assert ep.startswith("ok") and eng.endpoint in ep and "API 1." in ep and "Podman" in ep, ep
        assert "rootful" in doctor_line(out, "rootless")[0] or "rootless" in doctor_line(out, "rootless")[0]
        rt = doctor_line(out, "runtimes")[0]
        assert rt.startswith("ok") and "runc" in rt, rt
        assert "cgroup driver" in doctor_line(out, "cgroups")[0], out
        images = doctor_line(out, "image")
        assert any(ln.startswith("ok") and present in ln for ln in images), images
        missing = [ln for ln in images if "localhost/relay-absent:none" in ln]
        assert missing and missing[0].startswith("FAIL"), images
        assert "fix: pull or build localhost/relay-absent:none" in out, out
        # Nothing was left behind: doctor acquires nothing. (Podman's storage is shared by every
        # run on this machine: a probe container another relay left when it ended mid-probe is
        # not this doctor's; the next probe removes those after 10 minutes.)
        mine = [c for c in eng.containers(plugin="machine-docker", probe="1") if c["Created"] >= started]
        assert mine == [], mine
    # No engine at the endpoint: the failure names it and says how to start one.
    gone = "unix://" + os.path.join(tempfile.mkdtemp(prefix="docker-none-"), "absent.sock")
    code, out = doctor(binary, {"endpoint": gone, "images": {}})
    assert code == 1, out
    ep = doctor_line(out, "endpoint")[0]
    assert ep.startswith("FAIL") and gone in ep and "cannot be reached" in ep, ep
    assert "podman system service" in out, out


def test_bad_options_are_refused_by_name(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    cases = [({"endpoint": "tcp://10.0.0.1:2375"}, "TLS client certificates"),
             ({"endpoint": "http://x"}, "must start with unix://"),
             ({"images": {"bad key!": "x"}}, "not a valid image key"),
             ({"images": {"k": "has space"}}, "options.images.k must be an image reference"),
             ({"maxGuests": 0}, "options.maxGuests must be a whole number from 1 to 256"),
             ({"colour": "red"}, "unknown machine-docker option colour")]
    for options, expected in cases:
        code, out = doctor(binary, options)
        assert code == 1, out
        assert expected in doctor_line(out, "machine plugin")[0] or expected in out, (options, out)


if __name__ == "__main__":
    run_tests(globals())
