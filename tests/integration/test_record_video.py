#!/usr/bin/env python3
"""Screen recordings of runs (MCP_RELAY_RECORD=video, issue 25), as a user meets them: on
machine-local a step opens a page in Chromium and types into it with xdotool; its result names
the recording and its length; after relay_finish the package holds the recording
(state/videos/...), listed in the manifest with its size and SHA-256; ffprobe reads it (VP9 in
WebM, 1280x800, at most 8 fps); frames extracted with ffmpeg show the typing in progress (the
typed text grows from frame to frame); the package's index.html plays it in Chromium (the
<video> element reaches `ended`); `mcp-relay review` verifies it, and a copy of the package
whose recording was changed fails verification naming it. Without the setting no recording is
made. RELAY_VIDEO_TEST_SAVE=<folder> keeps the extracted frames for a person to look at."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gui_support import decode_png, hex_rgb, share  # noqa: E402
from relay_client import Skip, run_tests  # noqa: E402
from runs_support import namespaces_missing, run, stage, structured, text_of, variants  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BACKGROUND = "#f4e04a"
TEXT = "#101010"
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>relay video test</title>
<style>html,body{margin:0;height:100%%;background:%s}
input{position:fixed;left:40px;top:300px;width:1200px;height:120px;border:0;outline:0;
background:%s;color:%s;font:bold 90px monospace}</style></head>
<body><input id="t" autofocus></body></html>
""" % (BACKGROUND, BACKGROUND, TEXT)
TYPED = "relay video typing"
FLAGS = ("--no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --no-default-browser-check "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--disable-features=Translate --password-store=basic --user-data-dir=\"$HOME/.relay-chromium\" "
         "--window-position=0,0 --window-size=1280,800 --kiosk")


def needs():
    why = namespaces_missing()
    if why:
        raise Skip(why)
    for tool in ("chromium", "xdotool", "ffmpeg", "ffprobe", "node"):
        if not shutil.which(tool):
            raise Skip("%s is missing (apt-get install chromium xdotool ffmpeg nodejs)" % tool)
    if not os.path.isdir(os.path.join(HERE, "browser", "node_modules", "puppeteer-core")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=os.path.join(HERE, "browser"),
                           capture_output=True, timeout=300)
        if r.returncode != 0:
            raise Skip("npm ci in tests/integration/browser failed: %s" % r.stderr.decode()[-400:])


def typing_step(r, name, guest_root):
    page = "file://%s/workspace/page.html" % guest_root
    code = ("%s %s '%s' >/dev/null 2>&1 &\n"
            "xdotool search --sync --onlyvisible --class chromium >/dev/null\n"
            "sleep 2\n"
            "xdotool type --delay 180 '%s'\n"
            "sleep 1\n" % (shutil.which("chromium"), FLAGS, page, TYPED))
    return run(r, name, code, timeout=240, timeoutMs=90000, snapshots={"afterIntervalMs": 500})


def ink(png_path):
    """How much of the input box is the text colour (the typed text's share), or None when the
    frame does not show the page yet (Chromium still starting)."""
    with open(png_path, "rb") as f:
        _, _, rows = decode_png(f.read())
    if share(rows, hex_rgb(BACKGROUND), (40, 500, 1240, 780)) < 0.9:
        return None
    return share(rows, hex_rgb(TEXT), (40, 300, 1240, 420))


def frames_of(video, folder):
    os.makedirs(folder, exist_ok=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", video, "-vf", "fps=2", "-pix_fmt", "rgb24",
                    os.path.join(folder, "frame-%03d.png")], check=True, timeout=120)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".png"))


def test_a_typing_step_is_recorded(binary):
    needs()
    for v in variants(binary, kinds=("local",)):
        with v.relay(MCP_RELAY_RECORD="video") as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            os.makedirs(os.path.join(v.project, "site"), exist_ok=True)
            with open(os.path.join(v.project, "site", "page.html"), "w") as f:
                f.write(PAGE)
            res = stage(r, name, workspace="site")
            assert res["isError"] is False, text_of(res)
            res = typing_step(r, name, g["guestRoot"])
            assert res["isError"] is False, text_of(res)[:3000]
            s = structured(res)
            rec = s["recording"]
            assert rec["status"] == "recorded", rec
            assert rec["path"].startswith("state/videos/") and rec["path"].endswith(".webm"), rec
            assert 4000 < rec["durationMs"] < 60000, rec
            lead = text_of(res).splitlines()[0]
            assert "screen recording %.1f s" % (rec["durationMs"] // 100 / 10.0) in lead, lead
            assert "ffmpeg" not in json.dumps(s["leftRunning"]), s["leftRunning"]
            res = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert res["isError"] is False, text_of(res)[:3000]
        evidence = g["evidencePath"]
        video = os.path.join(evidence, rec["path"])
        with open(video, "rb") as f:
            data = f.read()
        import hashlib
        assert hashlib.sha256(data).hexdigest() == rec["sha256"] and len(data) == rec["bytes"]
        with open(os.path.join(evidence, "manifest.json")) as f:
            manifest = json.load(f)
        entry = [e for e in manifest["records"] if e["path"] == rec["path"]]
        assert entry and entry[0]["sha256"] == rec["sha256"] and entry[0]["bytes"] == rec["bytes"], entry
        # ffprobe reads it.
        probe = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", video],
                               capture_output=True, timeout=60)
        assert probe.returncode == 0, probe.stderr.decode()
        info = json.loads(probe.stdout)
        stream = info["streams"][0]
        assert stream["codec_name"] == "vp9" and (stream["width"], stream["height"]) == (1280, 800), stream
        num, den = (int(x) for x in stream["r_frame_rate"].split("/"))
        assert num / den <= 8.01, stream["r_frame_rate"]
        seconds = float(info["format"]["duration"])
        assert abs(seconds * 1000 - rec["durationMs"]) < 2500, (seconds, rec)
        # 2 MiB a minute at most, for this mostly still screen.
        assert len(data) <= 2 * 1024 * 1024 * max(seconds, 1) / 60 + 64 * 1024, (len(data), seconds)
        # Frames show the typing in progress: the typed text grows.
        keep = os.environ.get("RELAY_VIDEO_TEST_SAVE") or tempfile.mkdtemp(prefix="relay-video-frames-")
        frames = frames_of(video, keep)
        inks = [ink(p) for p in frames]
        assert inks[0] is None, ("the recording does not begin before the page opens", inks)
        inks = [x for x in inks if x is not None]
        assert inks and inks[0] < 0.005, ("the page's first frame already shows text", inks)
        final = max(inks)
        assert final > 0.03, ("no frame shows the typed text", inks)
        partial = [x for x in inks if 0.1 * final < x < 0.85 * final]
        assert len(partial) >= 2, ("no frame shows the typing in progress", inks)
        # The package verifies, and its viewer page plays the recording.
        out = subprocess.run([binary, "review", evidence], capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        review = json.loads(out.stdout)
        details = review["details"].values() if isinstance(review["details"], dict) else review["details"]
        recs = [d.get("recording") for d in details if d.get("recording")]
        assert recs and recs[0]["path"] == rec["path"], recs
        played = subprocess.run(["node", os.path.join(HERE, "browser", "play_video.mjs"),
                                 os.path.join(evidence, "index.html")], capture_output=True, timeout=180)
        assert played.returncode == 0, played.stderr.decode()[-2000:]
        videos = json.loads(played.stdout)["videos"]
        assert len(videos) == 1 and videos[0]["ended"] is True and videos[0]["width"] == 1280, videos
        # A copy whose recording was changed fails verification, naming it.
        copy = tempfile.mkdtemp(prefix="relay-video-tampered-")
        tampered = os.path.join(copy, "pkg")
        shutil.copytree(evidence, tampered)
        path = os.path.join(tampered, rec["path"])
        with open(path, "r+b") as f:
            f.seek(len(data) // 2)
            b = f.read(1)
            f.seek(len(data) // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        out = subprocess.run([binary, "review", tampered], capture_output=True, timeout=120)
        assert out.returncode == 1, out.returncode
        assert rec["path"] in out.stderr.decode(), out.stderr.decode()[-2000:]
        shutil.rmtree(copy)


def test_no_recording_without_the_setting(binary):
    needs()
    for v in variants(binary, kinds=("local",)):
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            res = stage(r, name)
            assert res["isError"] is False, text_of(res)
            res = run(r, name, "true\n", timeout=120)
            assert res["isError"] is False, text_of(res)
            assert "recording" not in structured(res), structured(res)
            assert "recording" not in text_of(res).splitlines()[0]
            r.call_tool("relay_release", {"guest": name}, timeout=300)


if __name__ == "__main__":
    run_tests(globals())
