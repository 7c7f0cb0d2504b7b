"""relay_image's pulls from the guest (spec/images.md §5, §6): one shared budget of three
byte-transfer attempts, metadata included; only transient failures tried again; lasting ones,
unsafe paths and integrity failures final; a pulled copy that differs discarded; and an image
block kept beside isError when a later step failed (spec/mcp.md §7, §16 item 30).

The pulls are scripted as rules of the fault shim over reference-machine (tests/plugins/
machine-faultshim). The step download of each run is made to fail for good (its archive pull is
refused), so the originals stay in the guest and relay_image must pull them itself.
"""

import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from images_support import (ImagesEnv, chattr_immutable, check_attached, check_failed, delivery, display_target,
                            image_block, png, sha256)
from lifecycle_support import structured
from relay_client import run_tests

BEFORE = png(48, 32, seed=11)
AFTER = png(48, 32, seed=12)
# The shim's status names for the results these tests speak of, and back.
CODES = {"transient": "transient failure", "refused": "refused", "unsafe-path": "unsafe path",
         "not-found": "not found"}
SHORT = {v: k for k, v in CODES.items()}
# What a transport says with each (the relay words its diagnostics from them).
REASONS = {"transient": "connection reset while pulling (fault script)",
           "refused": "the guest refused to send the file (HTTP 403, fault script)",
           "unsafe-path": "the guest path resolves through a symbolic link (fault script)",
           "not-found": "the file does not exist in the guest (fault script)"}


def pull_rule(result, match, times=1):
    """A shim rule for the pulls whose guest path holds `match`: `result` ("corrupt" or a CODES key)."""
    if result == "corrupt":
        return {"op": "pull", "match": match, "fault": "corrupt", "times": times}
    return {"op": "pull", "match": match, "fault": "fail", "code": CODES[result], "reason": REASONS[result],
            "times": times}


NO_DOWNLOADS = pull_rule("refused", "/.archive-", times=-1)


def prepared(env, r, extra_pulls=()):
    """A staged guest and one run whose step download failed; the fake's pull script is then
    `extra_pulls`. Returns (guest, run result)."""
    env.set_capture(before=BEFORE, after=AFTER)
    g = env.acquire_staged(r)
    env.script([NO_DOWNLOADS])
    run = structured(env.run(r, g, "true"))
    record = env.wait_downloaded(g, run["executionId"])
    assert record["status"] == "failed", record
    env.script([NO_DOWNLOADS] + list(extra_pulls))
    image_dir = os.path.join(g["evidencePath"], "host", "images", run["imageDelivery"]["image"]["imageId"])
    assert not os.path.exists(os.path.join(image_dir, "original.png"))
    return g, run


def after_pulls(env, run):
    return [SHORT.get(e["result"], e["result"]) for e in env.pulls(run["executionId"] + "-after.png")]


def reference(run):
    return {"source": "reference", "imageId": run["imageDelivery"]["image"]["imageId"]}


def no_original(g, run):
    folder = os.path.join(g["evidencePath"], "host", "images", run["imageDelivery"]["image"]["imageId"])
    names = os.listdir(folder) if os.path.isdir(folder) else []
    assert "original.png" not in names, names
    assert not [n for n in names if n.startswith(".relay-image-")], names


def test_fails_twice_then_succeeds(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r, [pull_rule("transient", "-after.png", times=2)])
            d, preview = check_attached(env.image(r, g, reference(run)))
            assert preview == AFTER
            assert after_pulls(env, run) == ["transient", "transient", "ok"]
            with open(d["image"]["originalPath"], "rb") as f:
                assert f.read() == AFTER
    finally:
        env.cleanup()


def test_fails_three_times(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r, [pull_rule("transient", "-after.png", times=3)])
            res = env.image(r, g, reference(run))
            d = check_failed(res, "transfer-failed")
            assert "3 transfer attempts" in d["diagnostic"] and "never by repeating the input" in d["diagnostic"]
            assert image_block(res) is None
            assert after_pulls(env, run) == ["transient"] * 3
            no_original(g, run)
            # the recovery the spec advises: the same reference again, never the input again
            d, preview = check_attached(env.image(r, g, reference(run)))
            assert preview == AFTER
            assert after_pulls(env, run) == ["transient"] * 3 + ["ok"]
            # nothing was run again in the guest: one execution in its journal
            with open(os.path.join(g["guestRoot"], "state", "journal", "events.jsonl")) as f:
                starts = [json.loads(line) for line in f if '"execution-start"' in line]
            assert [e["executionId"] for e in starts] == [run["executionId"]], starts
    finally:
        env.cleanup()


def test_budget_is_shared_with_metadata(binary):
    """The display selector pulls the action record from the guest first: with two transient
    failures of the image after it, the three attempts are spent."""
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r, [pull_rule("transient", "-after.png", times=2)])
            res = env.image(r, g, display_target(run, "after"))
            check_failed(res, "transfer-failed")
            assert len(env.pulls("/state/records/action/action-" + run["executionId"])) == 1
            assert after_pulls(env, run) == ["transient", "transient"]
            # without failures the display selector cross-checks and delivers
            d, preview = check_attached(env.image(r, g, display_target(run, "after")))
            assert preview == AFTER
    finally:
        env.cleanup()


def test_lost_receipt_is_fetched_from_the_guest(binary):
    """A run whose receipt did not come home names its image pending without identity
    (spec/images.md §8.1); relay_image then fetches the receipt from the guest as metadata, within
    the budget, and caches its validated imageEvidence on the host."""
    env = ImagesEnv(binary)
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            env.script([NO_DOWNLOADS, pull_rule("refused", "/state/receiver/receipts/")])
            res = env.run(r, g, "true", expect_error=True)
            run = structured(res)
            assert run["outcome"]["kind"] == "uncertain", run["outcome"]
            assert run["imageDelivery"] == {"status": "pending"}, run["imageDelivery"]
            assert run["executionFailed"] is True
            env.wait_downloaded(g, run["executionId"])
            target = {"source": "display", "sessionId": g["recordingSessionId"],
                      "executionId": run["executionId"], "phase": "after"}
            d, preview = check_attached(env.image(r, g, target))
            assert preview == AFTER
            receipt_pulls = env.pulls("/state/receiver/receipts/" + run["executionId"])
            assert [e["result"] for e in receipt_pulls] == ["refused", "ok"], receipt_pulls
            cache = os.path.join(g["evidencePath"], "host", "image-evidence", run["executionId"] + ".json")
            with open(cache) as f:
                cached = json.load(f)
            assert cached["imageEvidence"]["status"] == "available"
            # the next delivery of this run reads the cache, not the guest
            check_attached(env.image(r, g, dict(target, phase="before")))
            assert len(env.pulls("/state/receiver/receipts/" + run["executionId"])) == 2
    finally:
        env.cleanup()


def test_lasting_failures_are_not_retried(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r, [pull_rule("refused", "-after.png"), pull_rule("unsafe-path", "-after.png"),
                                       pull_rule("not-found", "-after.png")])
            check_failed(env.image(r, g, reference(run)), "transfer-failed")
            assert after_pulls(env, run) == ["refused"]
            d = check_failed(env.image(r, g, reference(run)), "unsafe-path")
            assert "symbolic link" in d["diagnostic"]
            assert after_pulls(env, run) == ["refused", "unsafe-path"]
            check_failed(env.image(r, g, reference(run)), "image-missing")
            assert after_pulls(env, run) == ["refused", "unsafe-path", "not-found"]
            no_original(g, run)
    finally:
        env.cleanup()


def test_integrity(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r, [pull_rule("corrupt", "-after.png")])
            # a transport that delivers other bytes than the guest holds: discarded
            d = check_failed(env.image(r, g, reference(run)), "integrity-failed")
            assert "discarded" in d["diagnostic"]
            no_original(g, run)
            # the guest's original changed after the run: a reference never yields other bytes
            snap = os.path.join(g["guestRoot"], "state", "snapshots", g["recordingSessionId"],
                                run["executionId"] + "-after.png")
            with open(snap, "wb") as f:
                f.write(png(48, 32, seed=99))
            check_failed(env.image(r, g, reference(run)), "integrity-failed")
            check_failed(env.image(r, g, display_target(run, "after")), "integrity-failed")
            no_original(g, run)
            # a tampered catalog entry is not trusted
            with open(snap, "wb") as f:
                f.write(AFTER)
            check_attached(env.image(r, g, reference(run)))
            entry_path = os.path.join(env.session_dir, "image-catalog", g["purpose"],
                                      run["imageDelivery"]["image"]["imageId"] + ".json")
            with open(entry_path) as f:
                entry = json.load(f)
            entry["descriptor"]["bytes"] += 1
            with open(entry_path, "w") as f:
                json.dump(entry, f)
            check_failed(env.image(r, g, reference(run)), "integrity-failed")
    finally:
        env.cleanup()


def test_gone_guest_is_stale(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g, run = prepared(env, r)
            env.script(env.read_control()["faults"]
                       + [{"op": "inspect", "fault": "fail", "code": "not found", "times": 1}])
            d = check_failed(env.image(r, g, reference(run)), "stale-reference")
            assert d["diagnostic"] == "the saved image's guest is no longer available"
            assert after_pulls(env, run) == []
    finally:
        env.cleanup()


def test_image_block_kept_beside_is_error(binary):
    """spec/mcp.md §16 item 30: the preview was produced, then writing the delivery receipt failed
    (the image folder is made immutable): isError is true and the image block stays."""
    env = ImagesEnv(binary)
    folder = None
    try:
        env.set_capture(before=BEFORE, after=AFTER)
        with env.relay() as r:
            r.initialize()
            g = env.acquire_staged(r)
            run = structured(env.run(r, g, "true"))
            env.wait_downloaded(g, run["executionId"])
            d, _ = check_attached(env.image(r, g, reference(run)))
            folder = os.path.dirname(d["image"]["originalPath"])
            if not chattr_immutable(folder, True):
                print("note: chattr +i is not possible here (needs CAP_LINUX_IMMUTABLE and ext4-like "
                      "attributes); the image-block-beside-isError case was skipped")
                return
            res = env.image(r, g, reference(run))
            d = check_failed(res, "transfer-failed")
            assert "preview was produced" in d["diagnostic"]
            block = image_block(res)
            assert block is not None and block["mimeType"] == "image/png"
            assert res["content"][1]["type"] == "image"
            assert base64.b64decode(block["data"]) == AFTER
            assert d["presentation"]["sha256"] == sha256(AFTER)
    finally:
        if folder:
            chattr_immutable(folder, False)
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
