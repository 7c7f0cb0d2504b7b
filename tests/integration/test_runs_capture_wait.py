#!/usr/bin/env python3
"""The capture wait of relay_stage (spec/guest.md §11.3): when the image lists capture software and no
test screenshot arrives within 120 s, staging fails with capture-unavailable and the capture
command's last diagnostic, sending a progress notification every 5 s meanwhile. Uses
the fault shim over reference-machine with tests/plugins/capture-fake (scripted to fail) selected by an environment
profile. Takes about two minutes."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import (_write_profile, build_dir, shim_so, run, stage, structured, text_of,  # noqa: E402
                          variants)


def test_capture_unavailable_after_120_seconds(binary):
    capture = os.path.join(build_dir(binary), "tests", "plugins", "capture-fake.so")
    if not os.path.exists(capture):
        skip("capture-fake.so is not built (%s)" % capture)
    for v in variants(binary, kinds=("shim",)):
        shots = os.path.join(v.root, "shots")
        os.makedirs(shots)
        open(os.path.join(shots, "fail-before"), "w").close()
        open(os.path.join(shots, "fail-after"), "w").close()
        v.extra_env["VM_ENVIRONMENT_FILE"] = _write_profile(v, {"machine": shim_so(binary), "capture": capture})
        with v.relay(RELAY_FAKE_CAPTURE_DIR=shots) as r:
            r.initialize()
            g = v.acquire(r)
            res = stage(r, g["guest"], progress_token="wait-1")
            s = structured(res)
            assert s["error"]["code"] == "capture-unavailable", text_of(res)
            assert "no test screenshot arrived within 120 s" in s["error"]["message"]
            assert "capture-fake: scripted before failure" in s["error"]["message"], s["error"]["message"]
            assert s["guestState"]["staged"] is False, s
            ticks = [n for n in r.notifications if n["method"] == "notifications/progress"
                     and "capture test running" in n["params"].get("message", "")]
            assert len(ticks) >= 20, len(ticks)
            # Without the failure the same guest stages, and the wait passes at once.
            os.unlink(os.path.join(shots, "fail-before"))
            os.unlink(os.path.join(shots, "fail-after"))
            with open(os.path.join(shots, "before.png"), "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
            with open(os.path.join(shots, "after.png"), "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + b"\1" * 64)
            res = stage(r, g["guest"])
            assert res["isError"] is False, text_of(res)
            assert structured(res)["capabilities"]["snapshots"]["enabled"] is True
            s = structured(run(r, g["guest"], "true"))
            assert s["imageEvidence"]["status"] == "available" and s["imageDelivery"]["status"] == "pending", s
            # A failed after-capture: the run is uncertain and its image delivery says why.
            open(os.path.join(shots, "fail-after"), "w").close()
            res = run(r, g["guest"], "echo ran")
            s = structured(res)
            assert s["outcome"]["kind"] == "uncertain" and s["stdout"] == "ran\n", s
            assert s["imageEvidence"]["status"] == "capture-failed", s
            assert s["imageDelivery"]["status"] == "capture-failed", s
            assert s["error"]["code"] == "execution-uncertain"
            # A failed before-capture refuses the run: nothing ran.
            open(os.path.join(shots, "fail-before"), "w").close()
            s = structured(run(r, g["guest"], "echo never"))
            assert s["outcome"]["kind"] == "refused" and s["stdout"] == "", s
            assert s["imageDelivery"]["status"] in ("capture-failed", "not-requested"), s


if __name__ == "__main__":
    run_tests(globals())
