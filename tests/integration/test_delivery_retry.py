"""A failed delivery keeps the guest for a corrected attempt (spec/evidence.md §9.1 "Failure",
spec/lifecycle.md §13.2 rule 4), and a finish whose destruction cannot be verified keeps ownership
with the package standing; each second relay_finish completes.

A delivery is made to fail the way a host can break it: a symbolic link planted in the
evidence folder, which verification never accepts. The failed attempt removes only the derived
files it created (OPENING.txt, index.html, manifest.json), keeps every piece of evidence, and
records <evidence>.delivery-error.json and a delivery-failed event.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import (DeliveryEnv, events, files_under, review, structured, text_of,  # noqa: E402
                              variants)


def test_failed_delivery_then_second_finish(binary):
    for env in variants(binary):
        failed_delivery_then_second_finish(binary, env)


def failed_delivery_then_second_finish(binary, env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r, extractions=[{"name": "out", "path": "out.txt"}])
        g, evidence = acq["guest"], acq["evidencePath"]
        env.stage(r, g)
        env.run(r, g, "echo result > out.txt", reason="produce the output")
        env.wait_downloads(r, g, lambda d: d["downloaded"] == 1 and d["inFlight"] == 0)

        planted = os.path.join(evidence, "host", "planted")
        os.symlink("/etc/hostname", planted)
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is True, text_of(fin)
        s = structured(fin)
        assert s["error"]["code"] == "delivery-failed", s["error"]
        assert "host/planted" in s["error"]["message"], s["error"]["message"]
        assert s["delivered"] is False and s["released"] is False, s
        assert s["guestState"]["phase"] == "staged" and s["guestState"]["delivered"] is False, s["guestState"]
        assert "relay_finish failed" in s["guestState"]["lastError"], s["guestState"]["lastError"]
        for derived in ("OPENING.txt", "index.html", "manifest.json"):
            assert not os.path.exists(os.path.join(evidence, derived)), derived
        kept = files_under(evidence)
        assert any(p.startswith("state/journal/") for p in kept), kept
        assert any(p.startswith("extractions/out/") for p in kept), kept
        with open(evidence + ".delivery-error.json") as f:
            derr = json.load(f)
        assert "host/planted" in derr["error"] and derr["at"], derr
        assert events(evidence, "delivery-failed"), "no delivery-failed event"
        assert structured(r.call_tool("relay_status"))["guests"][0]["downloads"]["state"] == "open"

        # Corrected: the same guest finishes.
        os.unlink(planted)
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is False, text_of(fin)
        s = structured(fin)
        assert s["delivered"] and s["deliveryVerified"] and s["released"] and s["destructionVerified"], s
    rc, data, err = review(binary, evidence)
    assert rc == 0, err
    # The output was pulled by both attempts, each into a fresh folder.
    assert len(os.listdir(os.path.join(evidence, "extractions", "out"))) == 2


def test_unverified_destruction_then_second_finish(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g, evidence = acq["guest"], acq["evidencePath"]
            env.stage(r, g)
            env.run(r, g, "true")
            env.write_control({"faults": [{"op": "verify_destroyed", "fault": "fail", "code": "unverified", "times": 1}]})
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is True, text_of(fin)
            s = structured(fin)
            assert s["error"]["code"] == "destruction-unverified", s["error"]
            assert s["delivered"] is True and s["deliveryVerified"] is True, s
            assert s["released"] is False and s["destructionVerified"] is False, s
            assert s["guestState"]["delivered"] is True, s["guestState"]
            assert os.path.exists(os.path.join(evidence, "manifest.json"))
            manifest = open(os.path.join(evidence, "manifest.json")).read()
            rc, _, err = review(binary, evidence)
            assert rc == 0, err

            # The retry goes straight to the destruction; the package is not rewritten.
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            s = structured(fin)
            assert s["released"] is True and s["destructionVerified"] is True and s["execution"] == "passed", s
            assert open(os.path.join(evidence, "manifest.json")).read() == manifest
        rc, _, err = review(binary, evidence)
        assert rc == 0, err
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
