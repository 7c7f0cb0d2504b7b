#!/usr/bin/env python3
"""What the engine really applies, and what it cannot (issue 22, defects 6 and 8).

- options.runtime is verified after create: Podman's compatible API ignores HostConfig.Runtime
  (its inspect says "oci"; its own API says which runtime the container got), so a guest asked
  with "runsc" ran on runc while the record said runsc. Now acquire refuses, naming both
  runtimes and the remedy that works for Podman (start the service with that runtime), and
  leaves no container; without the option the record names the runtime the guest really got.
- A missing image is asked of the engine (/images/create) instead of being refused by the
  core before the plugin saw it; there is no registry here, so the engine's pull fails, and
  acquire says so with the engine's own reason.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import (Engine, acquire, diag, doctor, doctor_line, plugin_missing, store_of,  # noqa: E402
                            structured, text_of)


def setup(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)


def lease_records(r):
    folder = os.path.join(store_of(r), "leases")
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                out.append(json.load(f))
    return out


def engine_runtime(eng):
    code, info = eng.api("GET", "/info")
    assert code == 200, info
    return info["DefaultRuntime"]


def test_runtime_the_engine_ignores_is_refused(binary):
    setup(binary)
    with Engine() as eng:
        real = engine_runtime(eng)
        other = "runsc" if real != "runsc" else "runc"
        with eng.relay(binary, {"minimal": eng.image("minimal")}, extra_options={"runtime": other}) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "rt", "image": "minimal", "extractions": []}, timeout=300)
            text = text_of(res)
            assert res["isError"] is True, text
            assert 'options.runtime is "%s", but the engine runs the guest with %s' % (other, real) in text, text
            assert "podman --runtime" in text, text
            assert eng.containers(store=store_of(r)) == [], eng.containers(store=store_of(r))


def test_runtime_recorded_is_the_one_used(binary):
    setup(binary)
    with Engine() as eng:
        real = engine_runtime(eng)
        with eng.relay(binary, {"minimal": eng.image("minimal")}) as r:
            r.initialize()
            g = acquire(r, "minimal")
            recs = [x for x in lease_records(r) if x.get("vm") == g["vm"]]
            assert len(recs) == 1 and recs[0]["runtime"] == real, recs
            assert r.call_tool("relay_release", {"guest": g["guest"]}, timeout=300)["isError"] is False


def test_missing_image_is_pulled_and_the_engine_says_why_not(binary):
    setup(binary)
    with Engine() as eng:
        ref = "localhost:5/mcp-relay-test-missing:nope"
        with eng.relay(binary, {"gone": ref}) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "pull", "image": "gone", "extractions": []}, timeout=300)
            text = text_of(res)
            assert res["isError"] is True, text
            err = structured(res)["error"]
            assert err["code"] == "image-unavailable", err
            assert "cannot be pulled" in err["message"] or "pulling it failed" in err["message"], err
            # The engine's own reason (it tried the registry at localhost:5).
            assert "localhost:5" in err["message"] and ("connect" in err["message"] or "refused" in err["message"]), err
            assert structured(r.call_tool("relay_status"))["guests"] == []


def test_glob_names_are_refused_with_the_reason(binary):
    """Rough edge: Podman expands [ ] * ? in an archive path; a pull that takes the archive API
    (MCP_RELAY_RESIDENT=off) refuses such a name, named. Over the resident channel the receiver
    reads the file itself, by its literal name: a[1].txt comes home, not a1.txt."""
    setup(binary)
    with Engine() as eng:
        for resident in ("off", "on"):
            with eng.relay(binary, {"minimal": eng.image("minimal")}, MCP_RELAY_RESIDENT=resident) as r:
                r.initialize()
                g = acquire(r, "minimal", extractions=[{"name": "glob", "path": "out/a[1].txt"}])
                assert r.call_tool("relay_stage", {"guest": g["guest"]}, timeout=300)["isError"] is False
                s = diag(r, g["guest"], "mkdir -p %s/out && echo x > '%s/out/a[1].txt' && echo y > %s/out/a1.txt"
                         % ((g["workspace"],) * 3))
                assert s["outcome"]["exitStatus"]["code"] == 0, s
                res = r.call_tool("relay_extract", {"guest": g["guest"], "names": ["glob"]}, timeout=300)
                text = text_of(res)
                if resident == "off":
                    assert res["isError"] is True and "expands as a pattern" in text and "a[1].txt" in text, text
                else:
                    assert res["isError"] is False, text
                    dest = structured(res)["extractions"][0]["destination"]
                    with open(os.path.join(dest, "a[1].txt")) as f:
                        assert f.read() == "x\n", os.listdir(dest)
                r.call_tool("relay_release", {"guest": g["guest"]}, timeout=300)


def test_doctor_network_matches_acquire(binary):
    """Rough edge: doctor said Ready with MCP_RELAY_GUEST_NETWORK=internet while acquire refused
    it; doctor's network line now says what acquire does (egress: issue 23)."""
    setup(binary)
    with Engine() as eng:
        images = {"minimal": eng.image("minimal")}
        opts = {"endpoint": eng.endpoint, "images": images}
        if eng.runtime:
            opts["runtime"] = eng.runtime
        rc, out = doctor(binary, opts, MCP_RELAY_GUEST_NETWORK="internet")
        line = doctor_line(out, "network")[0]
        with eng.relay(binary, images, MCP_RELAY_GUEST_NETWORK="internet") as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "net", "image": "minimal", "extractions": []}, timeout=300)
            if res["isError"] is False:
                r.call_tool("relay_release", {"guest": structured(res)["guest"]}, timeout=300)
        assert line.startswith("ok") == (res["isError"] is False), (line, text_of(res))


def test_search_names_an_engine_that_does_not_answer(binary):
    """Rough edge: with the engine down relay_search said "no application matches"."""
    setup(binary)
    with Engine() as eng:
        nothing = "unix://" + os.path.join(eng.dir, "nothing.sock")
        with eng.relay(binary, {"minimal": eng.image("minimal")}, extra_options={"endpoint": nothing}) as r:
            r.initialize()
            res = r.call_tool("relay_search", {"name": "sleep"}, timeout=120)
            text = text_of(res)
            assert res["isError"] is True, text
            assert "does not answer" in text and "nothing.sock" in text, text


def dpkg_image(eng, base, package):
    """`base` with this host's own dpkg status stanza and file list of `package`."""
    import subprocess
    import tempfile
    with open("/var/lib/dpkg/status") as f:
        stanza = [b for b in f.read().split("\n\n") if b.startswith("Package: %s\n" % package)]
    listing = "/var/lib/dpkg/info/%s.list" % package
    if not stanza or not os.path.exists(listing):
        skip("this host's dpkg has no %s" % package)
    d = tempfile.mkdtemp(prefix="relay-docker-dpkg-")
    os.makedirs(os.path.join(d, "info"))
    with open(os.path.join(d, "status"), "w") as f:
        f.write(stanza[0] + "\n\n")
    with open(listing) as src, open(os.path.join(d, "info", package + ".list"), "w") as dst:
        dst.write(src.read())
    with open(os.path.join(d, "Containerfile"), "w") as f:
        f.write("FROM %s\nCOPY status /var/lib/dpkg/status\nCOPY info /var/lib/dpkg/info\n" % base)
    tag = "localhost/mcp-relay-test-dpkg-%s:%s" % (package, base.rsplit(":", 1)[1])
    p = subprocess.run(eng.cli + ["build", "--pull=never", "-t", tag, d], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return tag


def test_search_finds_a_command_of_a_package(binary):
    """Rough edge: relay_search matched package names only (xclock is in x11-apps)."""
    setup(binary)
    with Engine() as eng:
        img = dpkg_image(eng, eng.image("minimal"), "xvfb")  # installs Xvfb and xvfb-run
        with eng.relay(binary, {"xvfb": img}) as r:
            r.initialize()
            res = r.call_tool("relay_search", {"name": "xvfb-run"}, timeout=300)
            text = text_of(res)
            assert res["isError"] is False, text
            names = [a["name"] for a in structured(res)["applications"]]
            assert "xvfb" in names, text


if __name__ == "__main__":
    run_tests(globals())
