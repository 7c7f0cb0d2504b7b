#!/usr/bin/env python3
"""The live view in a browser (MCP_RELAY_VNC_VIEWER=browser, issue 25), as a person uses it, on
machine-local: relay_console_open starts the bridge and "opens" its one-time URL with $BROWSER
(here a stand-in that writes the URL down); the report says the browser was opened and names
only the loopback origin; the URL is on standard error. Headless Chromium (puppeteer-core on the
system Chromium, driven in real time) opens the URL and within 5 s its noVNC canvas shows the
colour a step painted on the guest's display; a second page with the same (now used) token, or
with none, or with a wrong one, gets 403 and no canvas; nothing of the bridge listens on an
address other than 127.0.0.1 (`ss -ltn`); a colour change reaches the canvas (the frame latency,
printed); relay_console_cancel stops the bridge (its port closes). With
MCP_RELAY_CONSOLE_CONTROL=allow a pointer event from the page moves nothing until the person
clicks "take control", then it does; the take-over's start and end are recorded with their
times."""
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Skip, run_tests  # noqa: E402
from runs_support import events as guest_events  # noqa: E402
from runs_support import namespaces_missing, run, stage, structured, text_of, variants  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAINT = (0xC0, 0x3A, 0x2B)
REPAINT = (0x2B, 0x6C, 0xC0)


def paint_script(colour, name):
    """A full-screen xclock drawn in one colour (Xvfb resets the root window when its last client
    leaves, so a window that stays is what paints the screen)."""
    c = "#%02x%02x%02x" % colour
    return ("xclock -name %s -bg '%s' -fg '%s' -hd '%s' -hl '%s' -geometry 1280x800+0+0 >/dev/null 2>&1 &\n"
            "xdotool search --sync --onlyvisible --classname %s >/dev/null\nsleep 0.5\n" % (name, c, c, c, c, name))


def needs():
    why = namespaces_missing()
    if why:
        raise Skip(why)
    for tool in ("chromium", "node", "x11vnc", "xsetroot", "xdotool", "Xvfb"):
        if not shutil.which(tool):
            raise Skip("%s is missing (apt-get install chromium nodejs x11vnc x11-xserver-utils xdotool xvfb)" % tool)
    if not os.path.exists("/usr/share/novnc/core/rfb.js"):
        raise Skip("noVNC is missing (apt-get install novnc)")
    if not os.path.isdir(os.path.join(HERE, "browser", "node_modules", "puppeteer-core")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=os.path.join(HERE, "browser"),
                           capture_output=True, timeout=300)
        if r.returncode != 0:
            raise Skip("npm ci in tests/integration/browser failed: %s" % r.stderr.decode()[-400:])


class Page:
    """One headless Chromium page, driven by live_view.mjs."""

    def __init__(self):
        self.p = subprocess.Popen(["node", os.path.join(HERE, "browser", "live_view.mjs")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def __call__(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, "the browser driver ended"
        out = json.loads(line)
        assert "error" not in out, out
        return out

    def close(self):
        try:
            self(op="close")
        finally:
            self.p.wait(timeout=30)


def browser_stand_in(folder):
    """$BROWSER: writes the URL it is given to a file, as a browser would open it."""
    path = os.path.join(folder, "browser.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nprintf '%%s\\n' \"$1\" >> %s/urls.txt\n" % folder)
    os.chmod(path, 0o755)
    return path, os.path.join(folder, "urls.txt")


def open_args(guest, console_id, attempt_id):
    return {"guest": guest, "console_id": console_id, "attempt_id": attempt_id, "userRequested": True,
            "reason": "the user asked to watch the guest", "expected": "the guest's screen"}


def listening(port):
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return [l.split()[3] for l in out.splitlines() if l.split()[3].endswith(":%d" % port)]


def pointer_in_guest(r, name):
    out = text_of(run(r, name, "xdotool getmouselocation\n", timeout=120))
    m = re.search(r"x:(\d+) y:(\d+)", out)
    assert m, out[:600]
    return int(m.group(1)), int(m.group(2))


def url_of(urls_file):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not os.path.exists(urls_file):
        time.sleep(0.1)
    with open(urls_file) as f:
        url = f.read().strip().splitlines()[-1]
    assert re.match(r"^http://127\.0\.0\.1:\d+/#token=[0-9a-f]{64}$", url), url
    return url


def live_session(binary, control):
    folder = tempfile.mkdtemp(prefix="relay-live-")
    browser, urls = browser_stand_in(folder)
    env = {"MCP_RELAY_VNC_VIEWER": "browser", "BROWSER": browser}
    if control:
        env["MCP_RELAY_CONSOLE_CONTROL"] = "allow"
    return folder, urls, env


def test_live_view_shows_the_guest_to_the_token_only(binary):
    needs()
    for v in variants(binary, kinds=("local",)):
        folder, urls, env = live_session(binary, control=False)
        with v.relay(**env) as r:
            r.initialize()
            g = v.acquire(r, vnc=True)
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            painted = run(r, name, paint_script(PAINT, "relaypaint") + paint_script(REPAINT, "relayrepaint") +
                          "xdotool search --classname relayrepaint windowunmap --sync\n", timeout=120)
            assert painted["isError"] is False, text_of(painted)[:2000]
            if os.environ.get("RELAY_LIVE_TEST_SAVE"):
                shutil.copy(structured(painted)["imageDelivery"]["image"]["originalPath"],
                            os.path.join(os.environ["RELAY_LIVE_TEST_SAVE"], "painted-after.png"))
            opened = r.call_tool("relay_console_open", open_args(name, g["console"]["console_id"], "live1"),
                                 timeout=120)
            assert opened["isError"] is False, text_of(opened)
            rep = structured(opened)
            assert rep["attempt"]["status"] == "launched", rep
            live = rep["live_view"]
            assert live["browser_opened"] is True and live["launcher"] == "$BROWSER", live
            assert live["control"] == "view-only", live
            assert "the live view %s was opened with $BROWSER" % live["origin"] in text_of(opened), text_of(opened)
            url = url_of(urls)
            assert url.split("#")[0].rstrip("/") == live["origin"], (url, live)
            assert url.split("#")[1] not in json.dumps(rep), "the token is in the report"
            port = int(live["origin"].rsplit(":", 1)[1])
            assert listening(port) == ["127.0.0.1:%d" % port], listening(port)
            assert url in r.stderr_text(), "the URL is not logged on standard error"
            page = Page()
            try:
                t0 = time.monotonic()
                page(op="open", url=url)
                # Within 5 s of opening the URL (the page's load included).
                left_ms = max(0, int(5000 - (time.monotonic() - t0) * 1000))
                seen = page(op="colour", rgb=list(PAINT), timeoutMs=left_ms)
                if os.environ.get("RELAY_LIVE_TEST_SAVE"):
                    page(op="shot", path=os.path.join(os.environ["RELAY_LIVE_TEST_SAVE"], "live-view.png"))
                assert seen["ms"] is not None, ("the canvas did not show the guest within 5 s", seen)
                print("  live view: the guest's colour on the canvas %.0f ms after opening the URL"
                      % ((time.monotonic() - t0) * 1000))
                # Frame latency: a colour painted now reaches the canvas.
                ms = []
                init = g_init_pid(v, g)
                for i in range(6):
                    colour = REPAINT if i % 2 == 0 else PAINT
                    nsenter = ["nsenter", "--net=/proc/%d/ns/net" % init, "env", "DISPLAY=:0", "xdotool", "search",
                               "--classname", "relayrepaint", "windowmap" if i % 2 == 0 else "windowunmap"]
                    t = time.monotonic()
                    subprocess.run(nsenter, check=True, timeout=30)
                    got = page(op="colour", rgb=list(colour), timeoutMs=5000)
                    assert got["ms"] is not None, got
                    ms.append((time.monotonic() - t) * 1000)
                print("  frame latency (a window mapped or unmapped in the guest to the canvas), median of 6: %.0f ms (%s); machine shared by "
                      "seven helpers" % (statistics.median(ms), ", ".join("%.0f" % x for x in ms)))
                # The used token, no token, a wrong token: 403, nothing of the guest.
                for bad in (url, url.split("#")[0], url[:-4] + "0000"):
                    other = Page()
                    try:
                        other(op="open", url=bad)
                        st = other(op="wait_state", want="refused", timeoutMs=5000)
                        assert st["state"] == "refused", (bad, st)
                        seen = other(op="colour", rgb=list(PAINT), timeoutMs=1500)
                        assert seen["canvas"] is False and seen["ms"] is None, (bad, seen)
                    finally:
                        other.close()
                for path in ("/novnc/core/rfb.js", "/config", "/websockify"):
                    code = http_status(port, path)
                    assert code == 403, (path, code)
            finally:
                page.close()
            can = r.call_tool("relay_console_cancel", {"guest": name, "console_id": g["console"]["console_id"],
                                                       "attempt_id": "live1"}, timeout=60)
            assert can["isError"] is False, text_of(can)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and listening(port):
                time.sleep(0.1)
            assert not listening(port), "the bridge still listens after cancel"
            r.call_tool("relay_release", {"guest": name}, timeout=300)


def http_status(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   "Origin: http://127.0.0.1:%d\r\n\r\n" % (path, port, port)).encode())
        return int(s.recv(64).split()[1])
    finally:
        s.close()


def g_init_pid(v, g):
    """The guest init's pid, from machine-local's lease record (root test)."""
    for dirpath, _, files in os.walk(v.state_dir):
        if os.path.basename(dirpath) == g["vm"] and "lease.json" in files:
            with open(os.path.join(dirpath, "lease.json")) as fh:
                pid = json.load(fh).get("pids", {}).get("init", {}).get("pid")
            if pid:
                return pid
    raise AssertionError("no lease record with the init's pid for %s" % g["vm"])


def test_take_over_only_after_the_click(binary):
    needs()
    for v in variants(binary, kinds=("local",)):
        folder, urls, env = live_session(binary, control=True)
        with v.relay(**env) as r:
            r.initialize()
            g = v.acquire(r, vnc=True)
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            run(r, name, paint_script(PAINT, "relaypaint") + "xdotool mousemove 10 10\n", timeout=120)
            opened = r.call_tool("relay_console_open", open_args(name, g["console"]["console_id"], "ctl1"),
                                 timeout=120)
            assert opened["isError"] is False, text_of(opened)
            assert structured(opened)["live_view"]["control"] == "on-take-over", structured(opened)
            page = Page()
            try:
                page(op="open", url=url_of(urls))
                assert page(op="colour", rgb=list(PAINT), timeoutMs=5000)["ms"] is not None
                page(op="pointer", x=500, y=400)
                time.sleep(1)
                assert pointer_in_guest(r, name) == (10, 10), "input reached the guest before the take-over"
                assert page(op="take")["state"] == "control"
                page(op="pointer", x=600, y=300)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and pointer_in_guest(r, name) != (600, 300):
                    time.sleep(0.5)
                assert pointer_in_guest(r, name) == (600, 300), "input did not reach the guest after the take-over"
                assert page(op="give")["state"] == "connected"
                page(op="pointer", x=100, y=100)
                time.sleep(1)
                assert pointer_in_guest(r, name) == (600, 300), "input reached the guest after control was given back"
            finally:
                page.close()
            events = take_over_events(v, g, "ctl1")
            assert [e["event"] for e in events] == ["viewer-admitted", "control-start", "control-end"], events
            assert events[1]["at"] < events[2]["at"], events
            # Cancel reports the take-over, and the guest's event journal in the evidence keeps it.
            can = r.call_tool("relay_console_cancel", {"guest": name, "console_id": g["console"]["console_id"],
                                                       "attempt_id": "ctl1"}, timeout=60)
            assert can["isError"] is False, text_of(can)
            takes = structured(can)["live_view"]["take_overs"]
            assert takes == [{"start": events[1]["at"], "end": events[2]["at"]}], takes
            journal = [e for e in guest_events(g["evidencePath"]) if e.get("kind") == "console-take-over"]
            assert len(journal) == 1 and journal[0]["details"]["start"] == events[1]["at"] and \
                journal[0]["details"]["end"] == events[2]["at"], journal
            r.call_tool("relay_release", {"guest": name}, timeout=300)


def test_take_over_recorded_at_release_and_finish(binary):
    """A take-over reaches the evidence when the guest ends with the live view still open, not
    only through relay_console_cancel: relay_release (one given back) and relay_finish (one
    still in force: its end is null) cancel the attempt first, and the package's events hold a
    console-take-over with the bridge's times."""
    needs()
    for v in variants(binary, kinds=("local",)):
        folder, urls, env = live_session(binary, control=True)
        with v.relay(**env) as r:
            r.initialize()
            for ending in ("release", "finish"):
                g = v.acquire(r, vnc=True)
                name, attempt = g["guest"], "end-" + ending
                assert stage(r, name)["isError"] is False
                run(r, name, paint_script(PAINT, "relaypaint"), timeout=120)
                opened = r.call_tool("relay_console_open", open_args(name, g["console"]["console_id"], attempt),
                                     timeout=120)
                assert opened["isError"] is False, text_of(opened)
                page = Page()
                try:
                    page(op="open", url=url_of(urls))
                    assert page(op="colour", rgb=list(PAINT), timeoutMs=10000)["ms"] is not None
                    assert page(op="take")["state"] == "control"
                    if ending == "release":
                        assert page(op="give")["state"] == "connected"
                finally:
                    page.close()
                events = take_over_events(v, g, attempt)
                res = r.call_tool("relay_" + ending, {"guest": name}, timeout=300)
                assert res["isError"] is False, text_of(res)[:2000]
                start = [e["at"] for e in events if e["event"] == "control-start"]
                end = [e["at"] for e in events if e["event"] == "control-end"]
                assert len(start) == 1 and len(end) == (1 if ending == "release" else 0), events
                journal = [e for e in guest_events(g["evidencePath"]) if e.get("kind") == "console-take-over"]
                assert len(journal) == 1, (ending, journal)
                d = journal[0]["details"]
                assert d["attempt_id"] == attempt and d["start"] == start[0], (ending, d, events)
                assert d["end"] == (end[0] if end else None), (ending, d, events)
                cancels = [e for e in guest_events(g["evidencePath"]) if e.get("kind") == "console-cancel-intent"]
                assert cancels and cancels[-1]["details"]["reason"] == ("released" if ending == "release"
                                                                      else "finished"), cancels
                with open(os.path.join(g["evidencePath"], "manifest.json")) as f:
                    listed = json.dumps(json.load(f))
                assert journal and "host/events/" in listed, "the events are not in the package's manifest"
                # The review the person reads lists it, and the package's page shows it.
                out = subprocess.run([binary, "review", g["evidencePath"]], capture_output=True, timeout=120)
                assert out.returncode == 0, out.stderr.decode()[-2000:]
                takes = json.loads(out.stdout)["takeOvers"]
                assert takes == [{"attemptId": attempt, "start": d["start"], "end": d["end"]}], takes
                with open(os.path.join(g["evidencePath"], "index.html")) as f:
                    page_html = f.read()
                assert "<h2>Take-overs</h2>" in page_html and d["start"] in page_html, "the viewer page omits it"


def take_over_events(v, g, attempt):
    for dirpath, _, files in os.walk(v.state_dir):
        name = "console-%s.events.jsonl" % attempt
        if name in files:
            with open(os.path.join(dirpath, name)) as f:
                return [json.loads(l) for l in f if l.strip()]
    raise AssertionError("no take-over events recorded")


def test_live_view_of_a_docker_guest(binary):
    """machine-docker on a local engine: the same bridge, through the container's namespace. The
    test paints the container's display from this host with a full-screen xclock connected
    through the container's network namespace (X's abstract socket)."""
    needs()
    import docker_support
    from test_docker_console import console_image
    why = docker_support.plugin_missing(binary)
    if why:
        raise Skip(why)
    if not shutil.which("xclock") or not shutil.which("nsenter"):
        raise Skip("xclock or nsenter is missing (x11-apps, util-linux)")
    folder, urls, env = live_session(binary, control=False)
    painter = None
    with docker_support.Engine() as eng:
        with eng.relay(binary, {"console": console_image(eng)}, **env) as r:
            r.initialize()
            acq = docker_support.acquire(r, "console", task="live", vnc=True)
            name, vm = acq["guest"], acq["vm"]
            pid = eng.inspect(vm)["State"]["Pid"]
            c = "#%02x%02x%02x" % PAINT
            painter = subprocess.Popen(["nsenter", "--net=/proc/%d/ns/net" % pid, "xclock", "-display", ":0", "-bg", c,
                                        "-fg", c, "-hd", c, "-hl", c, "-geometry", "1280x800+0+0"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                opened = r.call_tool("relay_console_open", open_args(name, acq["console"]["console_id"], "d1"),
                                     timeout=120)
                assert opened["isError"] is False, text_of(opened)
                live = structured(opened)["live_view"]
                assert live["browser_opened"] is True, live
                url = url_of(urls)
                port = int(live["origin"].rsplit(":", 1)[1])
                assert listening(port) == ["127.0.0.1:%d" % port], listening(port)
                page = Page()
                try:
                    page(op="open", url=url)
                    seen = page(op="colour", rgb=list(PAINT), timeoutMs=5000)
                    assert seen["ms"] is not None, ("the canvas did not show the container's display", seen)
                finally:
                    page.close()
                can = r.call_tool("relay_console_cancel", {"guest": name, "console_id": acq["console"]["console_id"],
                                                           "attempt_id": "d1"}, timeout=60)
                assert can["isError"] is False, text_of(can)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and listening(port):
                    time.sleep(0.1)
                assert not listening(port), "the bridge still listens after cancel"
            finally:
                painter.kill()
                painter.wait()
            r.call_tool("relay_release", {"guest": name}, timeout=300)


if __name__ == "__main__":
    run_tests(globals())
