#!/usr/bin/env python3
"""machine-docker's derived images (docker_support.py engines): the guest program is baked
once per base image into localhost/mcp-relay-guest:<hex>, labelled with what it is made of;
a guest is a container of that image created with the lease's expiry as the backstop's
arguments, with nothing put into it before it starts; a second guest reuses the image; another
guest user gives another image; an image removed behind the relay's back is made again at the
next acquire; a console from an image without x11vnc is refused with the reason; relay_probe
says why snapshots and the console are off."""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
import json  # noqa: E402
from docker_support import (Engine, acquire, build_dir, engines, plugin_missing, sh, store_of, structured,  # noqa: E402
                            text_of)

REPO = "localhost/mcp-relay-guest"
BINARY = [None]


def guest_sha256():
    with open(os.path.join(build_dir(BINARY[0]), "plugins", "machine-docker", "machine-docker-guest"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def derived_images(eng):
    code, data = eng.api("GET", "/images/json")
    assert code == 200, (code, data)
    return {t: i for i in data for t in (i.get("RepoTags") or []) if t.startswith(REPO + ":")}


def image_of(eng, vm):
    info = eng.inspect(vm)
    ref = info["Config"]["Image"]
    code, img = eng.api("GET", "/images/%s/json" % ref)
    assert code == 200, (code, img)
    return info, ref, img


def test_derived_image(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    BINARY[0] = binary
    for eng in engines():
        base = eng.image("minimal")
        _, base_img = eng.api("GET", "/images/%s/json" % base)
        with eng.relay(binary, {"minimal": base}) as r:
            r.initialize()
            acq = acquire(r, "minimal")
            info, ref, img = image_of(eng, acq["vm"])
            assert ref.startswith(REPO + ":") and len(ref) == len(REPO) + 1 + 24, ref
            labels = img["Config"]["Labels"]
            assert labels["io.mcp-relay.derived.base-id"] == base_img["Id"], labels
            assert labels["io.mcp-relay.derived.base-ref"] == base, labels
            assert labels["io.mcp-relay.derived.guest-sha256"] == guest_sha256(), labels
            assert labels["io.mcp-relay.derived.key"].startswith(ref.split(":")[-1]), labels
            assert labels["io.mcp-relay.derived.xvfb"] == "0", labels
            # The backstop starts from the lease's expiry, given as arguments: nothing was put
            # into the container (no expires file until a renewal writes one).
            cmd = info["Config"]["Cmd"]
            assert info["Path"] == "/.mcp-relay/init" and cmd[0] == "init" and len(cmd) == 4, (info["Path"], cmd)
            with open(os.path.join(store_of(r), "leases", acq["vm"] + ".json")) as f:
                rec = json.load(f)
            assert [int(x) for x in cmd[1:3]] == [rec["expiresAtMs"], rec["graceMs"]], (cmd, rec)
            assert rec["guestImage"] == ref, rec
            code, _ = eng.api("GET", "/containers/%s/archive?path=%%2F.mcp-relay%%2Fexpires" % acq["vm"])
            assert code == 404, code
            # The guest program and its run folder are the image's: root-owned, the guest's.
            g = acq["guest"]
            assert r.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
            out = sh(r, g, "stat -c '%u %a' /.mcp-relay /.mcp-relay/init /.mcp-relay/run")
            assert out.split("\n")[:3] == ["0 755", "0 755", "61000 700"], out
            # No console from an image without Xvfb and x11vnc: refused with the reason before
            # anything is made (test_docker_console.py has the console of an image with both).
            bad = r.call_tool("relay_acquire", {"task": "vnc", "image": "minimal", "extractions": [], "vnc": True},
                              timeout=120)
            assert bad["isError"] and "it has neither" in text_of(bad), text_of(bad)
            assert len(eng.containers(store=store_of(r))) == 1, eng.containers(store=store_of(r))
            # A second guest of the same base reuses the image.
            before = derived_images(eng)
            acq2 = acquire(r, "minimal", task="docker-two")
            _, ref2, img2 = image_of(eng, acq2["vm"])
            assert ref2 == ref and img2["Id"] == img["Id"] and derived_images(eng).keys() == before.keys()
            for a in (acq, acq2):
                res = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=120)
                assert res["isError"] is False, res
        # Another guest user: another image, whose run folder is that user's.
        with eng.relay(binary, {"minimal": base}, extra_options={"guestUser": {"uid": 61001, "gid": 61001}}) as r:
            r.initialize()
            acq = acquire(r, "minimal")
            _, ref3, _ = image_of(eng, acq["vm"])
            assert ref3 != ref, (ref3, ref)
            g = acq["guest"]
            assert r.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
            assert sh(r, g, "stat -c %u /.mcp-relay/run").strip() == "61001"
            res = r.call_tool("relay_release", {"guest": g}, timeout=120)
            assert res["isError"] is False, res
        # Removed behind the relay's back: made again at the next acquire.
        with eng.relay(binary, {"minimal": base}) as r:
            r.initialize()
            acq = acquire(r, "minimal")
            res = r.call_tool("relay_release", {"guest": acq["guest"]}, timeout=120)
            assert res["isError"] is False, res
            code, data = eng.api("DELETE", "/images/%s?force=1" % ref)
            assert code == 200, (code, data)
            assert ref not in derived_images(eng)
            acq = acquire(r, "minimal", task="docker-again")
            _, ref4, _ = image_of(eng, acq["vm"])
            assert ref4 == ref and ref in derived_images(eng), (ref4, ref)
            res = r.call_tool("relay_release", {"guest": acq["guest"]}, timeout=120)
            assert res["isError"] is False, res


def test_display_and_console_facts(binary):
    """relay_probe says why snapshots and the console are off, per image and per option."""
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        images = {"full": eng.image("full"), "minimal": eng.image("minimal")}
        cases = [("auto", "on: Xvfb in the image"), ("off", "off: the image has Xvfb, but options.display is off")]
        for display, expect in cases:
            with eng.relay(binary, images, extra_options={"display": display}) as r:
                r.initialize()
                probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
                text = json.dumps(probe)
                assert expect in text and "off: the image has no Xvfb" in text, probe
                assert "off: the image has no x11vnc" in text, probe


if __name__ == "__main__":
    run_tests(globals())
