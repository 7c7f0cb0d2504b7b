#!/usr/bin/env python3
"""machine-local for a relay that is not root (issue 21, docs/machine-local.md "Without root").
Run by root, the file runs itself again as the ordinary user relayci (rootless_support.py); run
by an ordinary user, it runs as that user. Through the real binary and real guests of the image
`local` (the host root):

  - the guest's user is a subordinate id of the relay's user (one per guest), never the relay's
    user: the uid the host sees for a guest's process is in /etc/subuid's range and not the
    user's; a `sleep` left running belongs to that id and is gone after release;
  - writes at the guest's /etc, /tmp, /var/tmp and home never reach the host, and release
    leaves no lease folder (the upper layer held files of the subordinate id);
  - under nat the guest has tap0 with 10.0.2.100 and a default route, and the reject routes of
    the private ranges; a recorded script runs;
  - a fork bomb is stopped at the process bound while the host still forks and a second guest
    still runs a recorded script;
  - doctor's verdict matches what acquire does, with and without a subordinate range (a user
    without one is made for the test when it runs as root).
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import NotSelected, run_tests, skip  # noqa: E402
from rootless_support import as_ordinary_user  # noqa: E402
from runs_support import diag, make_variant, run, stage, structured, text_of  # noqa: E402

OPTIONS = {"display": "off", "maxGuests": 3, "bounds": {"processes": 48}}
RTF_REJECT = 0x0200


def sub_range(path, user):
    with open(path) as f:
        for line in f:
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[0] in (user.pw_name, str(user.pw_uid)):
                return int(parts[1]), int(parts[2])
    return None


def local_variant(binary, options=None):
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(options if options is not None else OPTIONS)
    return v


def me():
    return pwd.getpwuid(os.getuid())


def need_subids():
    r = sub_range("/etc/subuid", me())
    if r is None:
        skip("user %s has no range in /etc/subuid (sudo usermod --add-subuids 100000-165535 "
             "--add-subgids 100000-165535 %s)" % (me().pw_name, me().pw_name))
    return r


def out_of(s):
    return s["output"] if isinstance(s.get("output"), str) else json.dumps(s.get("output"))


def shell(r, guest, code, timeout_ms=60000):
    s = diag(r, guest, code, timeout_ms=timeout_ms)
    return out_of(s)


def host_procs(marker):
    """{pid: uid} of host processes whose command line contains `marker`."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmd:
                continue
            with open("/proc/%s/status" % pid) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        found[int(pid)] = int(line.split()[1])
        except OSError:
            continue
    return found


def routes(r, guest):
    """(interfaces with an IPv4 address, [(dest, mask, flags, iface)]) inside the guest."""
    out = shell(r, guest, "cat /proc/net/route; echo ===; ip -4 -o addr show 2>/dev/null || "
                          "cat /proc/net/fib_trie")
    table, addrs = out.split("===")
    rows = []
    for line in table.strip().splitlines()[1:]:
        f = line.split()
        rows.append((f[1], f[7], int(f[3], 16), f[0]))
    return addrs, rows


def acquired(v, r):
    """A guest of the image local, staged (recorded runs need it)."""
    g = v.acquire(r)["guest"]
    res = stage(r, g)
    assert res["isError"] is False, text_of(res)
    return g


def test_guest_is_a_subordinate_id(binary):
    first, count = need_subids()
    v = local_variant(binary)
    marker = "3%05d" % (os.getpid() % 100000)
    try:
        with v.relay() as r:
            r.initialize()
            g = acquired(v, r)
            res = run(r, g, "id -u; echo recorded-ok", timeout=120)
            assert res["isError"] is False, text_of(res)
            s = structured(res)
            assert s["outcome"]["exitStatus"]["code"] == 0 and "recorded-ok" in s["stdout"], s
            guest_uid = int(s["stdout"].split()[0])
            assert guest_uid != 0, s
            out = shell(r, g, "setsid sleep %s </dev/null >/dev/null 2>&1 & echo started; "
                              "echo guest-etc > /etc/relay-rootless-probe 2>/dev/null; echo etc=$?; "
                              "echo t > /tmp/relay-rootless-%s; echo v > /var/tmp/relay-rootless-%s; "
                              "echo h > ~/relay-rootless-%s; echo wrote=$?" % (marker, marker, marker, marker))
            assert "started" in out and "wrote=0" in out, out
            assert "etc=0" not in out, out  # the guest user may not write the base's /etc
            time.sleep(0.5)
            procs = host_procs("sleep " + marker)
            assert procs, "the guest's sleep is not visible on the host"
            for pid, uid in procs.items():
                assert uid != os.getuid(), "guest process %d runs as the relay's user %d" % (pid, uid)
                assert first <= uid < first + count, (pid, uid, first, count)
            print("  guest uid %d is host uid %s (range %d+%d); relay user %d" % (
                guest_uid, sorted(set(procs.values())), first, count, os.getuid()), flush=True)
            # Nothing the guest wrote reached the host.
            for p in ("/etc/relay-rootless-probe", "/tmp/relay-rootless-" + marker,
                      "/var/tmp/relay-rootless-" + marker, os.path.expanduser("~/relay-rootless-" + marker)):
                assert not os.path.exists(p), p
            leases = os.path.join(v.state_dir)
            res = r.call_tool("relay_release", {"guest": g}, timeout=120)
            assert res["isError"] is False, text_of(res)
            time.sleep(0.2)
            assert host_procs("sleep " + marker) == {}, "the guest's sleep survived its release"
            left = subprocess.run(["find", leases, "-path", "*leases/local-*"], stdout=subprocess.PIPE,
                                  text=True).stdout
            assert left.strip() == "", left
    finally:
        v.cleanup()


def tun_usable():
    try:
        os.close(os.open("/dev/net/tun", os.O_RDWR))
        return True
    except OSError:
        return False


def test_nat_network_and_reject_routes(binary):
    need_subids()
    if not tun_usable():
        # What a user gets here: loopback only, and doctor names the cause and the fix.
        v = local_variant(binary)
        try:
            rc, out = doctor(v)
            assert "/dev/net/tun" in out and "chmod 0666 /dev/net/tun" in out, out
        finally:
            v.cleanup()
        skip("/dev/net/tun cannot be opened by %s (doctor says so with the fix); run as root, which "
             "makes it 0666 for the test" % me().pw_name)
    for helper in ("pasta", "slirp4netns"):
        if not shutil.which(helper):
            print("  %s is not installed: not tried" % helper, flush=True)
            continue
        v = local_variant(binary, dict(OPTIONS, networkHelper=helper))
        try:
            with v.relay() as r:
                r.initialize()
                g = acquired(v, r)
                addrs, rows = routes(r, g)
                assert "10.0.2.100" in addrs, (helper, addrs)
                default = [x for x in rows if x[0] == "00000000" and x[1] == "00000000"]
                assert default and default[0][3] != "lo" and not default[0][2] & RTF_REJECT, (helper, rows)
                rejects = {(d, m) for d, m, fl, _ in rows if fl & RTF_REJECT}
                assert ("0000000A", "000000FF") in rejects, rows          # 10.0.0.0/8
                assert ("0000A8C0", "0000FFFF") in rejects, rows          # 192.168.0.0/16
                assert ("000010AC", "0000F0FF") in rejects, rows          # 172.16.0.0/12
                out = shell(r, g, "ip route del unreachable 10.0.0.0/8 2>&1; echo del=$?")
                assert "del=0" not in out, out  # the guest cannot remove them
                res = run(r, g, "echo net-ok", timeout=120)
                assert res["isError"] is False and "net-ok" in structured(res)["stdout"], text_of(res)
                print("  %s: tap0 10.0.2.100, default route via %s, %d reject routes" % (
                    helper, default[0][3], len(rejects)), flush=True)
                res = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert res["isError"] is False, text_of(res)
        finally:
            v.cleanup()


def lease_record(v):
    """The lease record of the only guest in v's state (machine-local's lease.json)."""
    leases = os.path.join(v.state_dir, "plugins", "machine-local", "leases")
    names = [n for n in os.listdir(leases) if os.path.exists(os.path.join(leases, n, "lease.json"))]
    assert len(names) == 1, names
    with open(os.path.join(leases, names[0], "lease.json")) as f:
        return os.path.join(leases, names[0]), json.load(f)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_pasta_goes_with_its_guest(binary):
    """A guest that dies without a release (its relay killed, then its init) takes its pasta
    with it: pasta holds the guest's namespaces by descriptor and would never see them go, so a
    keeper ends it (issue 21; found by CI's user lane, where ten pastas outlived their guests).
    Also: pasta joins the launcher's namespaces, not the init's, which move on (the intermittent
    "Couldn't switch to pasta namespaces" of doctor): ten acquisitions in a row all get a network."""
    need_subids()
    if not tun_usable() or not shutil.which("pasta"):
        skip("pasta is not installed or /dev/net/tun cannot be opened by %s; run as root, which "
             "makes it 0666 for the test" % me().pw_name)
    v = local_variant(binary, dict(OPTIONS, networkHelper="pasta"))
    try:
        with v.relay() as r:
            r.initialize()
            for i in range(10):
                g = v.acquire(r)["guest"]
                res = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert res["isError"] is False, "acquisition %d: %s" % (i, text_of(res))
            v.acquire(r)
            lease_dir, record = lease_record(v)
            helper = record["pids"]["helper"]["pid"]
            init = record["pids"]["init"]["pid"]
            assert record["pids"]["helper"]["name"] == "pasta" and alive(helper), record["pids"]
            keepers = host_procs(lease_dir + "/pasta.pid")
            assert helper in keepers and len(keepers) == 2, keepers  # pasta and its keeper
            r.proc.kill()
            r.proc.wait(timeout=10)
        os.kill(init, 9)
        deadline = time.monotonic() + 10
        while (alive(helper) or host_procs(lease_dir + "/pasta.pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = host_procs(lease_dir + "/pasta.pid")
        assert not alive(helper) and not left, "pasta (pid %d) outlived its guest's init: %r" % (helper, left)
        print("  pasta %d and its keeper ended %.1f s after the init" % (helper, 10 - (deadline - time.monotonic())),
              flush=True)
        with v.relay() as r:  # the next relay settles the dead guest: nothing of it is left
            r.initialize()
            for g in structured(r.call_tool("relay_status"))["guests"]:
                res = r.call_tool("relay_release", {"guest": g["guest"]}, timeout=120)
                assert res["isError"] is False or structured(res)["error"]["code"] == "nothing-held", text_of(res)
            deadline = time.monotonic() + 30
            while os.path.exists(lease_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not os.path.exists(lease_dir), "the dead guest's lease folder %s was never removed" % lease_dir
    finally:
        v.cleanup()


def test_fork_bomb_is_bounded(binary):
    need_subids()
    v = local_variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            a = v.acquire(r)["guest"]
            b = acquired(v, r)
            code = ("sh -c 'n=0; while [ $n -lt 1000 ]; do sleep 120 </dev/null >/dev/null 2>&1 & "
                    "n=$((n+1)); echo $n > /tmp/forks; done' 2>/tmp/bomb.err; echo status=$?; "
                    "read n < /tmp/forks; echo forks=$n; read e < /tmp/bomb.err; echo \"err=$e\"")
            out = shell(r, a, code, timeout_ms=120000)
            assert "status=2" in out and "fork" in out.lower(), out
            forks = int(out.split("forks=")[1].split()[0])
            assert 0 < forks < 48, out
            print("  the fork bomb was stopped after %d processes" % forks, flush=True)
            # The bomb's sleeps live on: the user's session still forks, guest B still runs.
            for _ in range(20):
                assert subprocess.run(["sh", "-c", "true & wait"], timeout=30).returncode == 0
            res = run(r, b, "echo during-the-bomb", timeout=120)
            assert res["isError"] is False and "during-the-bomb" in structured(res)["stdout"], text_of(res)
            for g in (a, b):
                res = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert res["isError"] is False, text_of(res)
    finally:
        v.cleanup()


def doctor(v):
    env = dict(os.environ)
    env.update(v.env())
    env.update(v.extra_env)
    res = subprocess.run([v.binary, "doctor"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, timeout=300)
    return res.returncode, res.stdout


def acquire_outcome(v):
    with v.relay() as r:
        r.initialize()
        res = r.call_tool("relay_acquire", {"task": "doctor-parity", "image": "local", "extractions": []},
                          timeout=120)
        ok = res["isError"] is False
        if ok:
            rel = r.call_tool("relay_release", {"guest": structured(res)["guest"]}, timeout=120)
            assert rel["isError"] is False, text_of(rel)
        return ok, text_of(res)


def test_doctor_matches_acquire(binary):
    v = local_variant(binary)
    try:
        rc, out = doctor(v)
        ok, text = acquire_outcome(v)
        ready = "Ready" in out.splitlines()[-1]
        print("  doctor: %s; acquire: %s" % (out.splitlines()[-1], "ok" if ok else text[:200]), flush=True)
        assert ready == ok, (out, text)
        if sub_range("/etc/subuid", me()) is None:
            assert "usermod --add-subuids" in out and "usermod --add-subuids" in text, (out, text)
            # The deployment may allow guests as the relay's own user.
            v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(
                dict(OPTIONS, rootless={"withoutSubids": "map-user"}))
            rc, out = doctor(v)
            ok, text = acquire_outcome(v)
            assert ok and "Ready" in out.splitlines()[-1], (out, text)
    finally:
        v.cleanup()


NOSUB_USER = "relay-nosubid"


def test_doctor_matches_acquire_without_subids(binary):
    """The same as a user without a subordinate range: run (as root) by the parent below."""
    if os.environ.get("RELAY_ROOTLESS_NOSUB") != "1":
        raise NotSelected("run by the root parent as the user %s (made for the test)" % NOSUB_USER)
    assert sub_range("/etc/subuid", me()) is None, "%s has a subordinate range" % me().pw_name
    test_doctor_matches_acquire(binary)


def nosub_parent():
    """Root only: makes a user without a subordinate range, runs the no-subids test as it."""
    if os.geteuid() != 0 or "-k" in sys.argv:
        return
    made = False
    try:
        pwd.getpwnam(NOSUB_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "-K", "SUB_UID_COUNT=0",
                        "-K", "SUB_GID_COUNT=0", NOSUB_USER], check=True)
        made = True
    try:
        from rootless_support import python_for_all, run_as
        res = run_as(NOSUB_USER, [python_for_all(), os.path.abspath(__file__)] + sys.argv[1:] +
                     ["-k", "test_doctor_matches_acquire_without_subids"],
                     env_extra={"RELAY_ROOTLESS_NOSUB": "1"})
        sys.stdout.write(res.stdout.replace("0 failed\n", ""))
        if res.returncode != 0:
            print("FAIL test_doctor_matches_acquire_without_subids (as %s)" % NOSUB_USER, flush=True)
            sys.exit(1)
    finally:
        if made:
            subprocess.run(["userdel", NOSUB_USER])


def test_console_answers_rfb(binary):
    """relay_console_open without root: x11vnc on the guest's display answers on the guest's
    127.0.0.1:5900 (the relay's probe reaches the guest's network namespace through the user
    namespace that owns it), and a client inside that namespace reads the RFB banner."""
    need_subids()
    for tool in ("Xvfb", "x11vnc"):
        if not shutil.which(tool):
            skip("%s is missing (apt-get install xvfb x11vnc)" % tool)
    v = local_variant(binary, {"maxGuests": 3, "bounds": {"processes": 256}})
    try:
        with v.relay() as r:
            r.initialize()
            acq = v.acquire(r, vnc=True)
            g = acq["guest"]
            res = r.call_tool("relay_console_open", {
                "guest": g, "console_id": acq["console"]["console_id"], "attempt_id": "rootless1",
                "userRequested": True, "reason": "the user asked to watch the guest",
                "expected": "the guest's screen"}, timeout=120)
            assert res["isError"] is False, text_of(res)
            opened = structured(res)
            assert opened["status"] == "ready" and opened["backend"] == "x11vnc", opened
            out = shell(r, g, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/5900 && head -c 12 <&3'; echo; echo rc=$?")
            assert out.startswith("RFB 003.008"), out
            print("  console: %s read in the guest's namespace" % out.split()[0:2])
            assert r.call_tool("relay_release", {"guest": g}, timeout=120)["isError"] is False
    finally:
        v.cleanup()


def console_variant(binary):
    need_subids()
    for tool in ("Xvfb", "x11vnc"):
        if not shutil.which(tool):
            skip("%s is missing (apt-get install xvfb x11vnc)" % tool)
    return local_variant(binary, {"maxGuests": 3, "bounds": {"processes": 256}})


def open_console(r, g, acq, attempt):
    return r.call_tool("relay_console_open", {
        "guest": g, "console_id": acq["console"]["console_id"], "attempt_id": attempt,
        "userRequested": True, "reason": "the user asked to watch the guest",
        "expected": "the guest's screen"}, timeout=120)


def cancel_console(r, g, acq, attempt):
    res = r.call_tool("relay_console_cancel", {"guest": g, "console_id": acq["console"]["console_id"],
                                               "attempt_id": attempt}, timeout=60)
    assert res["isError"] is False, text_of(res)
    return structured(res)


def test_console_viewer_without_root(binary):
    """MCP_RELAY_VNC_VIEWER=<command> without root: the viewer is started on this host with its
    network namespace switched to the guest's (through a child that joins the user namespace
    owning it: the relay's threads cannot), so `127.0.0.1::5900` reaches the guest's x11vnc; it
    has the one-time password in its environment, and cancel stops it."""
    v = console_variant(binary)
    folder = tempfile.mkdtemp(prefix="relay-watch2-viewer-")
    seen = os.path.join(folder, "seen.txt")
    viewer = os.path.join(folder, "viewer.sh")
    with open(viewer, "w") as f:
        f.write("#!/bin/bash\n"
                "{ readlink /proc/self/ns/net; echo \"arg=$1 password=${#VNC_PASSWORD}\"\n"
                "  exec 3<>/dev/tcp/127.0.0.1/5900 && head -c 12 <&3; echo; } > %s.part 2>&1\n"
                "mv %s.part %s\nsleep 300\n" % (seen, seen, seen))
    os.chmod(viewer, 0o755)
    try:
        with v.relay(MCP_RELAY_VNC_VIEWER=viewer) as r:
            r.initialize()
            acq = v.acquire(r, vnc=True)
            g = acq["guest"]
            res = open_console(r, g, acq, "viewer1")
            assert res["isError"] is False, text_of(res)
            opened = structured(res)
            assert opened["attempt"]["status"] == "launched", opened
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not os.path.exists(seen):
                time.sleep(0.1)
            with open(seen) as f:
                ns, args, banner = f.read().splitlines()[:3]
            guest_ns = shell(r, g, "readlink /proc/self/ns/net").strip()
            assert ns == guest_ns and ns != os.readlink("/proc/self/ns/net"), (ns, guest_ns)
            assert args == "arg=127.0.0.1::5900 password=8", args
            assert banner == "RFB 003.008", banner
            print("  viewer: in the guest's %s, read %r" % (ns, banner))
            viewers = host_procs(viewer)
            assert viewers, "the viewer is not running"
            cancelled = cancel_console(r, g, acq, "viewer1")
            assert cancelled["attempt"]["viewer_cleanup"] == "local-children-stopped", cancelled
            time.sleep(0.3)
            assert host_procs(viewer) == {}, "the viewer survived cancel"
            assert r.call_tool("relay_release", {"guest": g}, timeout=120)["isError"] is False
    finally:
        v.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def test_live_view_without_root(binary):
    """MCP_RELAY_VNC_VIEWER=browser without root: relay-vncweb bridges this host's 127.0.0.1 to
    the guest's x11vnc through the guest's user and network namespaces; headless Chromium
    (puppeteer-core) opens the one-time URL and within 5 s its canvas shows the colour a step
    painted on the guest's display; a reused token gets 403; cancel closes the port."""
    v = console_variant(binary)
    from test_console_live_view import PAINT, Page, browser_stand_in, listening, needs, paint_script, url_of
    needs()
    folder = tempfile.mkdtemp(prefix="relay-watch2-live-")
    browser, urls = browser_stand_in(folder)
    os.environ.setdefault("HOME", folder)  # Chromium's profile and caches
    try:
        with v.relay(MCP_RELAY_VNC_VIEWER="browser", BROWSER=browser) as r:
            r.initialize()
            acq = v.acquire(r, vnc=True)
            g = acq["guest"]
            assert stage(r, g)["isError"] is False
            painted = run(r, g, paint_script(PAINT, "relaypaint"), timeout=120)
            assert painted["isError"] is False, text_of(painted)[:2000]
            res = open_console(r, g, acq, "live1")
            assert res["isError"] is False, text_of(res)
            live = structured(res)["live_view"]
            assert live["browser_opened"] is True, live
            url = url_of(urls)
            port = int(live["origin"].rsplit(":", 1)[1])
            assert listening(port) == ["127.0.0.1:%d" % port], listening(port)
            page = Page()
            try:
                t0 = time.monotonic()
                page(op="open", url=url)
                left_ms = max(0, int(5000 - (time.monotonic() - t0) * 1000))
                seen = page(op="colour", rgb=list(PAINT), timeoutMs=left_ms)
                shot = os.environ.get("RELAY_LIVE_TEST_SAVE")
                if shot:
                    page(op="shot", path=os.path.join(shot, "live-view-rootless.png"))
                assert seen["ms"] is not None, ("the canvas did not show the guest within 5 s", seen)
                print("  live view without root: the guest's colour on the canvas %.0f ms after opening the URL"
                      % ((time.monotonic() - t0) * 1000))
            finally:
                page.close()
            other = Page()
            try:
                other(op="open", url=url)
                assert other(op="wait_state", want="refused", timeoutMs=5000)["state"] == "refused"
                assert other(op="colour", rgb=list(PAINT), timeoutMs=1500)["ms"] is None
            finally:
                other.close()
            cancel_console(r, g, acq, "live1")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and listening(port):
                time.sleep(0.1)
            assert not listening(port), "the bridge still listens after cancel"
            assert r.call_tool("relay_release", {"guest": g}, timeout=120)["isError"] is False
    finally:
        v.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def prepare_browser():
    """Root, before the rerun as the ordinary user: puppeteer-core installed in the source tree
    (which that user cannot write)."""
    if os.geteuid() != 0:
        return
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser")
    if shutil.which("npm") and not os.path.isdir(os.path.join(folder, "node_modules", "puppeteer-core")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, capture_output=True, timeout=300)


if __name__ == "__main__":
    nosub_parent()
    prepare_browser()
    as_ordinary_user(__file__)
    run_tests(globals())
