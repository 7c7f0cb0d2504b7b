#!/usr/bin/env python3
"""GUI work through the relay (spec/guest.md §16, spec/images.md §8.1), as a user does it: step 1 starts
an X application or a browser on the guest's display and exits; its after-image, attached to
the result, shows it (pixels of colours the test chose); step 2 drives it with xdotool and its
after-image shows the change; step 3 finds it still running; leftRunning names it in the
receipt and in the review, the viewer page says "left running"; the attached after-image is
byte for byte the original the evidence package holds, and the package verifies. On
machine-local and over transfer-ssh to the real sshd fixture (with a real Xvfb)."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gui_support import CLICKED_COLOUR, PAGE, PAGE_COLOUR, decode_png, hex_rgb, share  # noqa: E402
from relay_client import Skip, run_tests  # noqa: E402
from runs_support import lead_headline_rest, run, sh, stage, structured, text_of, variants  # noqa: E402

XCLOCK_BG = "#12c456"


def attached_image(res):
    """The attached after-image: checks the delivery, decodes the preview (the original when it
    needs no resampling) and returns (imageDelivery, PNG bytes)."""
    s = structured(res)
    d = s["imageDelivery"]
    assert d["status"] == "attached", (d, text_of(res)[:400])
    blocks = [c for c in res["content"] if c["type"] == "image"]
    assert len(blocks) == 1, res["content"]
    data = base64.b64decode(blocks[0]["data"])
    with open(d["image"]["originalPath"], "rb") as f:
        original = f.read()
    assert hashlib.sha256(original).hexdigest() == d["image"]["sha256"]
    if not d["presentation"]["transformed"]:
        assert data == original, "the attached preview is not the original"
    # RELAY_GUI_TEST_SAVE=<folder> keeps every after-image for a person to look at.
    keep = os.environ.get("RELAY_GUI_TEST_SAVE")
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, "%s-%s.png" % (s["step"]["id"], d["image"]["imageId"][6:14])), "wb") as f:
            f.write(original)
    return d, original


def gui_run(v, r, name, code, **extra):
    # On the sshd fixture the guest is this host: the script names the fixture's display.
    if v.display:
        code = "export DISPLAY=%s\n%s" % (v.display, code)
    res = run(r, name, code, timeout=240, timeoutMs=90000, **extra)
    s = structured(res)
    assert res["isError"] is False, text_of(res)[:3000]
    lead, head, _ = lead_headline_rest(text_of(res))
    assert lead.startswith("Step %s exited with status 0" % s["step"]["id"]) and "attached" in lead, lead
    return res, s


def check_review(binary, evidence, names):
    out = subprocess.run([binary, "review", evidence], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    review = json.loads(out.stdout)
    details = review["details"].values() if isinstance(review["details"], dict) else review["details"]
    left = [d["output"].get("leftRunning") for d in details if d.get("output")]
    listed = {p["command"] for lr in left if lr for p in lr["processes"]}
    for n in names:
        assert any(n in c for c in listed), (n, listed)
    with open(os.path.join(evidence, "index.html")) as f:
        page = f.read()
    assert "left running: " in page, "the viewer page does not say what was left running"
    return review


def test_x_application_stays_open_and_is_driven(binary):
    if not shutil.which("xclock") or not shutil.which("xdotool"):
        raise Skip("xclock or xdotool is missing (x11-apps, xdotool)")
    for v in variants(binary, kinds=("local", "ssh-x11")):
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            res = stage(r, name)
            assert res["isError"] is False, text_of(res)
            assert structured(res)["capabilities"]["snapshots"]["enabled"] is True, structured(res)
            # Step 1 opens the window and exits.
            res, s = gui_run(v, r, name, "xclock -bg '%s' -geometry 300x300+40+40 >/dev/null 2>&1 &\n"
                                      "xdotool search --sync --onlyvisible --class XClock >/dev/null\n"
                                      % XCLOCK_BG)
            assert [p["command"] for p in s["leftRunning"]["processes"]] == ["xclock"], s["leftRunning"]
            d, png = attached_image(res)
            w, h, rows = decode_png(png)
            assert share(rows, hex_rgb(XCLOCK_BG), (50, 50, 80, 80)) > 0.9, "step 1: no clock window at 40,40"
            assert share(rows, hex_rgb(XCLOCK_BG), (700, 450, 730, 480)) < 0.1
            # Step 2 drives it: the window moves.
            res, s = gui_run(v, r, name, "xdotool search --onlyvisible --class XClock windowmove --sync 700 450\n")
            d, png = attached_image(res)
            w, h, rows = decode_png(png)
            assert share(rows, hex_rgb(XCLOCK_BG), (710, 460, 740, 490)) > 0.9, "step 2: the window did not move"
            assert share(rows, hex_rgb(XCLOCK_BG), (50, 50, 80, 80)) < 0.1
            # Step 3 finds it still running.
            assert sh(r, name, "pgrep -x xclock >/dev/null && echo running") == "running\n"
            if v.display:  # the fixture's guest is this host: nothing ends it with the guest
                sh(r, name, "pkill -x xclock; true")
            res = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert res["isError"] is False, text_of(res)[:3000]
            check_review(binary, g["evidencePath"], ["xclock"])


def test_browser_page_is_clicked(binary):
    chromium = shutil.which("chromium")
    if not chromium or not shutil.which("xdotool"):
        raise Skip("chromium or xdotool is missing (apt-get install chromium xdotool)")
    for v in variants(binary, kinds=("local", "ssh-x11")):
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            os.makedirs(os.path.join(v.project, "site"), exist_ok=True)
            with open(os.path.join(v.project, "site", "page.html"), "w") as f:
                f.write(PAGE)
            res = stage(r, name, workspace="site")
            assert res["isError"] is False, text_of(res)
            page = "file://%s/workspace/page.html" % g["guestRoot"]
            flags = ("--no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --no-default-browser-check "
                     "--disable-background-networking --disable-component-update --disable-sync "
                     "--disable-features=Translate --password-store=basic --user-data-dir=\"$HOME/.relay-chromium\" "
                     "--window-position=0,0 --window-size=1280,800 --kiosk")
            res, s = gui_run(v, r, name, "%s %s '%s' >/dev/null 2>&1 &\n"
                                      "xdotool search --sync --onlyvisible --class chromium >/dev/null\n"
                                      "sleep 3\n" % (chromium, flags, page),
                             snapshots={"afterIntervalMs": 1500})
            assert "chromium" in {p["command"] for p in s["leftRunning"]["processes"]}, s["leftRunning"]
            d, png = attached_image(res)
            w, h, rows = decode_png(png)
            assert share(rows, hex_rgb(PAGE_COLOUR), (100, 100, 1180, 700)) > 0.8, "step 1: the page is not shown"
            res, s = gui_run(v, r, name, "xdotool mousemove 640 500 click 1\n", snapshots={"afterIntervalMs": 1000})
            d, png = attached_image(res)
            w, h, rows = decode_png(png)
            assert share(rows, hex_rgb(CLICKED_COLOUR), (100, 100, 1180, 700)) > 0.8, "step 2: the click changed nothing"
            assert sh(r, name, "pgrep chromium >/dev/null && echo running") == "running\n"
            if v.display:
                sh(r, name, "pkill -f 'relay-chromiu[m]'; true")
            res = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert res["isError"] is False, text_of(res)[:3000]
            check_review(binary, g["evidencePath"], ["chromium"])
            # The attached original is the one the package holds, and the package verifies.
            orig = d["image"]["originalPath"]
            assert os.path.exists(orig)
            with open(os.path.join(g["evidencePath"], "manifest.json")) as f:
                manifest = json.load(f)
            entries = manifest["records"] + manifest["snapshots"] + manifest["attachments"]
            rel = os.path.relpath(orig, g["evidencePath"])
            entry = [e for e in entries if e["path"] == rel]
            assert entry and entry[0]["sha256"] == d["image"]["sha256"], (rel, entry)
            snap = [e for e in manifest["snapshots"] if e["role"] == "after" and e["path"].endswith(
                "/%s-after.png" % d["image"]["executionId"])]
            assert snap and snap[0]["sha256"] == d["image"]["sha256"], snap
            out = subprocess.run([binary, "review", g["evidencePath"]], capture_output=True, timeout=120)
            assert json.loads(out.stdout)["verification"]["ok"] is True, out.stdout[:2000]


if __name__ == "__main__":
    run_tests(globals())
