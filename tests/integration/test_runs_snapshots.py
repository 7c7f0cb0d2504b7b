#!/usr/bin/env python3
"""Snapshots (spec/guest.md §10-§11, spec/images.md §8): staging's capture wait with a real Xvfb display
captured by capture-x11's relay-x11shot (and capture-cua with the machine-service stand-in's
fake cua-driver), before and after images of a run, text groups, and the pending after-image a
run names (runs_support.py: variants x11, local and service)."""
import hashlib
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from runs_support import diag, lead_headline_rest, run, sh, stage, structured, text_of, variants  # noqa: E402

IMAGE_ID = re.compile(r"^image-[0-9a-f]{64}$")


def test_snapshots_with_a_real_display(binary):
    for v in variants(binary, kinds=("x11", "local", "service")):
        plugin = "capture-cua" if v.kind == "service" else "capture-x11"
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name, root, ev = g["guest"], g["guestRoot"], g["evidencePath"]
            res = stage(r, name, progress_token="stage-1")
            assert res["isError"] is False, text_of(res)
            s = structured(res)
            snap = s["capabilities"]["snapshots"]
            assert snap["enabled"] is True and snap["capture"] == plugin, snap
            assert "a test screenshot arrived after" in snap["because"], snap
            assert text_of(res).split("\n")[0].endswith("; snapshots on"), text_of(res)
            if plugin == "capture-x11":
                assert sh(r, name, "test -x %s/bin/relay-x11shot && echo yes" % root) == "yes\n"
            else:
                assert s["cuaDriver"] == "cua-driver", s
            left = sh(r, name, "ls -A %s" % root).split()
            assert not [n for n in left if n.startswith(".capture-probe-")], left

            res = run(r, name, "echo hi")
            s = structured(res)
            assert res["isError"] is False, text_of(res)
            ie = s["imageEvidence"]
            assert ie["status"] == "available" and [x["phase"] for x in ie["snapshots"]] == ["before", "after"], ie
            after = ie["snapshots"][1]
            assert after["fileName"] == s["executionId"] + "-after.png" and after["declaredAfterIntervalMs"] == 500
            d = s["imageDelivery"]
            # The after-image rides the run's answer where the transport can (spec/guest.md §16.3).
            assert d["status"] == ("attached" if v.one_trip else "pending"), d
            assert IMAGE_ID.match(d["image"]["imageId"]), d
            assert len([c for c in res["content"] if c["type"] == "image"]) == (1 if v.one_trip else 0), res
            if v.one_trip:
                with open(d["image"]["originalPath"], "rb") as f:
                    original = f.read()
                assert hashlib.sha256(original).hexdigest() == after["sha256"], "attached original differs"
            img = d["image"]
            assert img["phase"] == "after" and img["executionId"] == s["executionId"] and img["source"] == "display"
            assert img["sha256"] == after["sha256"] and img["bytes"] == after["bytes"]
            assert img["originalPath"] == "%s/host/images/%s/original.png" % (ev, img["imageId"]), img
            head = lead_headline_rest(text_of(res))[1]
            assert head == {"imageDelivery": d, "executionFailed": False}, head
            req = json.load(open(os.path.join(ev, "host", "requests", s["executionId"] + ".json")))
            assert req["capture"]["plugin"] == plugin, req
            assert req["capture"]["check"] == ("cua-driver-json" if plugin == "capture-cua" else "png-file"), req
            sig = sh(r, name, "head -c 8 %s/state/snapshots/%s/%s | od -An -c | tr -d ' \\n'"
                     % (root, img["sessionId"], after["fileName"]))
            assert sig.startswith("211PNG"), sig

            # A text group shares one pair: first has the before, last the after.
            grp = {"groupId": "typing-1"}
            s1 = structured(run(r, name, "true", snapshots={"group": dict(grp, phase="first")}))
            s2 = structured(run(r, name, "true", snapshots={"group": dict(grp, phase="member")}))
            s3 = structured(run(r, name, "true", snapshots={"group": dict(grp, phase="last", afterIntervalMs=0)}))
            assert [x["phase"] for x in s1["imageEvidence"]["snapshots"]] == ["before"], s1
            assert s1["imageDelivery"] == {"status": "not-requested",
                                           "diagnostic": "the declared snapshot plan does not capture this phase"}
            assert s2["imageEvidence"] == {"status": "not-requested", "snapshots": []}, s2
            assert s2["imageDelivery"]["status"] == "not-requested"
            assert [x["phase"] for x in s3["imageEvidence"]["snapshots"]] == ["after"], s3
            assert s3["imageDelivery"]["status"] == ("attached" if v.one_trip else "pending"), s3
            assert s3["snapshots"]["afterIntervalMs"] == 0, s3
            # A group that was never opened is refused by the receiver, before anything runs.
            s4 = structured(run(r, name, "echo no", snapshots={"group": {"groupId": "typing-1", "phase": "member"}}))
            assert s4["outcome"]["kind"] == "refused" and s4["error"]["code"] == "execution-refused", s4
            assert s4["imageDelivery"]["status"] == "not-requested", s4

            # The background step download publishes the original where the run said.
            deadline = time.monotonic() + 60
            while not os.path.exists(img["originalPath"]) and time.monotonic() < deadline:
                time.sleep(0.2)
            with open(img["originalPath"], "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == img["sha256"]

            probe = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": name}))
            assert probe["snapshots"]["enabled"] is True and probe["captureVerified"] is False, probe
            assert "relay_stage reached" in probe["snapshots"]["reason"]
            # Diagnostic scripts never take snapshots.
            s = diag(r, name, "true")
            assert s["imageDelivery"]["status"] == "not-requested" and s["screenshotEvidence"] is False


if __name__ == "__main__":
    run_tests(globals())
