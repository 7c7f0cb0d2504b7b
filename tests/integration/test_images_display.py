"""relay_image display and reference selectors after real runs (spec/images.md §1.1, §1.3, §3, §7, §8).

Real relay_stage and relay_script runs over the fault shim on reference-machine take real snapshots (capture-fake
copies prepared PNGs) through the real guest receiver; the background step download brings
them home; relay_image resolves, cross-checks, publishes and presents them.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from images_support import (ImagesEnv, check_attached, check_failed, delivery, display_target, headline,
                            image_block, png, png_size, sha256)
from lifecycle_support import structured
from relay_client import run_tests

BEFORE = png(64, 48, seed=1)
AFTER = png(64, 48, seed=2)


def test_display_before_and_after(binary):
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            run = structured(env.run(r, g, "echo drawn"))
            pending = run["imageDelivery"]
            assert pending["status"] == "pending", run
            after_id = pending["image"]["imageId"]
            # the run names where the download publishes the original
            assert pending["image"]["originalPath"] == os.path.join(
                g["evidencePath"], "host", "images", after_id, "original.png")

            res = env.image(r, g, display_target(run, "after"))
            d, preview = check_attached(res)
            image = d["image"]
            # the same identity as the run announced
            assert image["imageId"] == after_id, (image, pending)
            for key in ("source", "enclosure", "sessionId", "executionId", "actionId", "stepId", "phase",
                        "capturedAt", "sha256", "bytes", "mimeType", "originalPath"):
                assert image[key] == pending["image"][key], key
            assert image["source"] == "display" and image["enclosure"] == g["purpose"]
            assert image["sha256"] == sha256(AFTER) and image["bytes"] == len(AFTER)
            # small enough: the preview is the original, unchanged
            assert preview == AFTER
            p = d["presentation"]
            assert p["transformed"] is False and (p["width"], p["height"]) == (64, 48)
            assert p["policy"]["processor"] == "mcp-relay/image-presentation"
            # the original is published and untouched; a delivery receipt beside it
            with open(image["originalPath"], "rb") as f:
                assert f.read() == AFTER
            assert os.stat(image["originalPath"]).st_nlink == 1
            folder = os.path.dirname(image["originalPath"])
            receipts = [n for n in os.listdir(folder) if n.startswith("delivery-")]
            statuses = set()
            for name in receipts:
                with open(os.path.join(folder, name)) as f:
                    rec = json.load(f)
                statuses.add(rec["status"])
                assert rec["image"]["imageId"] == after_id
            assert "attached" in statuses, statuses
            assert not [n for n in os.listdir(folder) if n.startswith(".relay-image-")]
            # the catalog entry binds the reference (spec/images.md §2.3)
            entry = env.catalog_entry(g, after_id)
            assert entry["descriptor"]["imageId"] == after_id
            assert "originalPath" not in entry["descriptor"]
            assert entry["fileName"] == run["executionId"] + "-after.png"
            assert entry["local"] == image["originalPath"]
            assert entry["remote"].startswith(g["guestRoot"] + "/state/snapshots/")

            res = env.image(r, g, display_target(run, "before"))
            d, preview = check_attached(res)
            assert preview == BEFORE and d["image"]["phase"] == "before"
            assert d["image"]["imageId"] != after_id

            # by reference, the same bytes
            res = env.image(r, g, {"source": "reference", "imageId": after_id})
            d, preview = check_attached(res)
            assert preview == AFTER and d["image"]["imageId"] == after_id
    finally:
        env.cleanup()


def test_original_at_home_needs_no_guest(binary):
    """Once the step download published an original, relay_image reads it from the host; a
    later run's after-image is a new identity and stays pending (spec/images.md §5, §8.1)."""
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            first = structured(env.run(r, g, "true"))
            env.wait_downloaded(g, first["executionId"])
            # A fresh run is a fresh execution, so its identity differs and it stays pending.
            second = env.run(r, g, "true")
            assert delivery(second)["status"] == "pending"
            assert image_block(second) is None
            # The first run's image is home: asking for it attaches without the guest.
            eid = first["executionId"]
            pulls_before = len(env.pulls(eid))
            res = env.image(r, g, {"source": "reference",
                                   "imageId": first["imageDelivery"]["image"]["imageId"]})
            check_attached(res)
            assert len(env.pulls(eid)) == pulls_before, "an original already home was pulled again"
    finally:
        env.cleanup()


def test_not_requested_phases(binary):
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            first = structured(env.run(r, g, "true", snapshots={"group": {"groupId": "typing", "phase": "first"}}))
            assert first["imageDelivery"]["status"] == "not-requested", first["imageDelivery"]
            member = structured(env.run(r, g, "true", snapshots={"group": {"groupId": "typing", "phase": "member"}}))
            last = structured(env.run(r, g, "true", snapshots={"group": {"groupId": "typing", "phase": "last"}}))
            assert last["imageDelivery"]["status"] == "pending", last["imageDelivery"]
            diag = structured(env.run(r, g, "uname -s", diagnostic=True))
            assert diag["imageDelivery"]["status"] == "not-requested"

            plan = "the declared snapshot plan does not capture this phase"
            for run, phase in ((first, "after"), (member, "before"), (member, "after"), (last, "before")):
                res = env.image(r, g, {"source": "display", "sessionId": g["recordingSessionId"],
                                       "executionId": run["executionId"], "phase": phase})
                assert res["isError"] is False, res["content"][0]["text"][:2000]
                d = delivery(res)
                assert d == {"status": "not-requested", "diagnostic": plan}, (phase, d)
                assert image_block(res) is None
                assert "error" not in structured(res)
            # the planned phases of the group are there
            check_attached(env.image(r, g, {"source": "display", "sessionId": g["recordingSessionId"],
                                            "executionId": first["executionId"], "phase": "before"}))
            check_attached(env.image(r, g, {"source": "display", "sessionId": g["recordingSessionId"],
                                            "executionId": last["executionId"], "phase": "after"}))
            for phase in ("before", "after"):
                res = env.image(r, g, {"source": "display", "sessionId": g["recordingSessionId"],
                                       "executionId": diag["executionId"], "phase": phase})
                assert res["isError"] is False
                assert delivery(res) == {"status": "not-requested",
                                         "diagnostic": "Diagnostic execution has no screenshot evidence."}
    finally:
        env.cleanup()


def test_snapshots_off_is_not_requested(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay(RELAY_FAKE_CAPTURE_DIR=None) as r:
            r.initialize()
            g = env.acquire_staged(r)
            run = structured(env.run(r, g, "true"))
            off = "snapshots are off for this image: its inventory lists no capture software"
            assert run["imageDelivery"] == {"status": "not-requested", "diagnostic": off}
            res = env.image(r, g, {"source": "display", "sessionId": g["recordingSessionId"],
                                   "executionId": run["executionId"], "phase": "after"})
            assert res["isError"] is False
            assert delivery(res) == {"status": "not-requested", "diagnostic": off}
    finally:
        env.cleanup()


def test_failed_capture(binary):
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            env.fail_capture("after")
            res = env.run(r, g, "true", expect_error=True)
            run = structured(res)
            # a failed after-capture makes the run uncertain and its image capture-failed
            assert run["imageDelivery"]["status"] == "capture-failed", run["imageDelivery"]
            assert headline(res)["imageDelivery"] == run["imageDelivery"]
            env.fail_capture("after", on=False)
            res = env.image(r, g, display_target(run, "after"))
            check_failed(res, "capture-failed")
            # the before-image of the same run was taken and is delivered
            check_attached(env.image(r, g, display_target(run, "before")))
    finally:
        env.cleanup()


def test_missing_and_unauthorized(binary):
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            a = env.acquire_staged(r)
            b = env.acquire_staged(r)
            run_a = structured(env.run(r, a, "true"))
            run_b = structured(env.run(r, b, "true"))
            # an execution this recording never had
            d = check_failed(env.image(r, a, {"source": "display", "sessionId": a["recordingSessionId"],
                                              "executionId": "run-00000000000000000000000000000000",
                                              "phase": "after"}), "image-missing")
            assert "run-00000000000000000000000000000000" in d["diagnostic"]
            # another guest's recording, and a recording nobody has
            d = check_failed(env.image(r, a, display_target(run_b, "after")), "unauthorized-reference")
            assert b["guest"] in d["diagnostic"]
            check_failed(env.image(r, a, {"source": "display", "sessionId": "rec-ffffffffffffffff",
                                          "executionId": run_a["executionId"], "phase": "after"}),
                         "unauthorized-reference")
            # another guest's imageId, and an id no catalog holds
            d = check_failed(env.image(r, a, {"source": "reference",
                                              "imageId": run_b["imageDelivery"]["image"]["imageId"]}),
                             "unauthorized-reference")
            assert b["guest"] in d["diagnostic"]
            check_failed(env.image(r, a, {"source": "reference", "imageId": "image-" + "0" * 64}), "image-missing")
            # each still delivers its own
            check_attached(env.image(r, b, display_target(run_b, "after")))
            res = env.image(r, a, {"source": "reference", "imageId": run_a["imageDelivery"]["image"]["imageId"]})
            check_attached(res)
            # error results carry the guest's state (spec/tools.md §2.3)
            res = env.image(r, a, {"source": "reference", "imageId": "image-" + "1" * 64})
            assert structured(res)["guestState"]["guest"] == a["guest"]
    finally:
        env.cleanup()


def test_stale_reference_after_release(binary):
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r, extractions=[{"name": "shot", "path": "shot.png"}])
            run = structured(env.run(r, g, "cp '%s' shot.png" % os.path.join(env.capture_dir, "after.png")))
            image_id = run["imageDelivery"]["image"]["imageId"]
            d, _ = check_attached(env.image(r, g, {"source": "reference", "imageId": image_id}))
            original = d["image"]["originalPath"]
            res = r.call_tool("relay_release", {"guest": g["guest"]}, timeout=180)
            assert res["isError"] is False, res["content"][0]["text"][:2000]

            closed = "the guest is closed or its evidence sealed; read the delivered originals with host file tools"
            for target in ({"source": "reference", "imageId": image_id}, display_target(run, "after"),
                           {"source": "application", "name": "shot"}):
                res = env.image(r, g, target)
                d = check_failed(res, "stale-reference")
                assert d["diagnostic"] == closed
                assert image_block(res) is None
            # a reference still names its original, which host tools can read
            d = delivery(env.image(r, g, {"source": "reference", "imageId": image_id}))
            assert d["image"]["originalPath"] == original
            with open(original, "rb") as f:
                assert f.read() == AFTER
            # any other per-guest tool is refused for the closed guest
            res = r.call_tool("relay_script", {"guest": g["guest"], "language": "shell", "inline": True,
                                               "code": "true"})
            assert structured(res)["error"]["code"] == "guest-closed"
    finally:
        env.cleanup()


def test_references_survive_a_recording_reset(binary):
    """spec/images.md §5: references survive recording resets through previousEvidence; the old
    recording's originals come from the host, with no guest state needed."""
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            old = structured(env.run(r, g, "true"))
            old_session = g["recordingSessionId"]
            res = r.call_tool("relay_stage", {"guest": g["guest"], "resetRecording": True}, timeout=180)
            assert res["isError"] is False, res["content"][0]["text"][:3000]
            staged = structured(res)
            assert staged["recordingSessionId"] != old_session
            pulls = len(env.pulls(old["executionId"] + "-after.png"))
            d, preview = check_attached(env.image(r, g, {"source": "display", "sessionId": old_session,
                                                         "executionId": old["executionId"], "phase": "after"}))
            assert preview == AFTER
            assert d["image"]["imageId"] == old["imageDelivery"]["image"]["imageId"]
            assert d["image"]["originalPath"].startswith(g["evidencePath"] + "/"), d["image"]
            d, preview = check_attached(env.image(r, g, {"source": "reference",
                                                         "imageId": old["imageDelivery"]["image"]["imageId"]}))
            assert preview == AFTER
            assert len(env.pulls(old["executionId"] + "-after.png")) == pulls
            # the new recording works as before
            env.set_capture(after=png(64, 48, seed=3))
            new = structured(env.run(r, g, "true"))
            assert new["imageEvidence"]["snapshots"][0]["sessionId"] == staged["recordingSessionId"]
            d, preview = check_attached(env.image(r, g, display_target(new, "after")))
            assert preview == png(64, 48, seed=3)
            assert d["image"]["originalPath"].startswith(staged["evidencePath"] + "/")
    finally:
        env.cleanup()


def test_large_display_is_resampled(binary):
    """A 5120x2880 snapshot gives a 2000x1125 PNG preview; the original is untouched."""
    env = ImagesEnv(binary)
    try:
        big = png(5120, 2880, seed=5, level=1)
        env.set_capture(before=BEFORE, after=big)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            run = structured(env.run(r, g, "true"))
            res = env.image(r, g, display_target(run, "after"))
            d, preview = check_attached(res)
            p = d["presentation"]
            assert (p["originalWidth"], p["originalHeight"]) == (5120, 2880)
            assert (p["width"], p["height"]) == (2000, 1125), p
            assert png_size(preview) == (2000, 1125)
            assert p["transformed"] is True and p["mimeType"] == "image/png"
            assert len(res["content"][1]["data"]) <= 4 * 1024 * 1024
            with open(d["image"]["originalPath"], "rb") as f:
                assert sha256(f.read()) == sha256(big) == d["image"]["sha256"]
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
