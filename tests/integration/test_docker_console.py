#!/usr/bin/env python3
"""machine-docker's console, through the real binary against a real engine (docker_support.py):

  - on a local engine (Podman's API service on a unix socket) relay_acquisition_capabilities
    says linux VNC is available, and relay_probe says per image whether it has x11vnc;
  - relay_acquire with vnc: true of an image with Xvfb and x11vnc (the "full" test image with
    this host's x11vnc and its libraries added) gives a ready console; relay_console_open starts
    x11vnc in the guest, and the report says where it listens: 127.0.0.1:5900 in the container's
    network namespace /proc/<State.Pid>/ns/net. The test enters that namespace with nsenter and
    does a real RFB handshake: the "RFB 003.00x" banner, then VNC authentication as the only
    security type (the one-time password is required); the password file x11vnc read is gone
    from the guest;
  - relay_console_cancel stops x11vnc (the port closes), and release removes the guest;
  - with MCP_RELAY_VNC_VIEWER, the viewer runs on this host in the container's namespace with
    the one-time password, and release stops it and removes its password file;
  - an image without x11vnc is refused with the reason; a remote endpoint (tcp:// with TLS, to
    dockerd) gets "linux unavailable", relay_probe says why, and relay_acquire with vnc is
    refused before anything is made.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
import docker_support  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, sh, structured, text_of  # noqa: E402

RFB_PROBE = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", 5900), timeout=5)
banner = s.recv(12)
out = {"banner": banner.decode(errors="replace")}
if banner.startswith(b"RFB 003."):
    s.sendall(b"RFB 003.008\n")
    n = s.recv(1)[0]
    out["security"] = list(s.recv(n)) if n else []
print(__import__("json").dumps(out))
"""


def console_image(eng):
    """The "full" test image with this host's x11vnc and its libraries in it."""
    if not os.path.exists("/usr/bin/x11vnc"):
        skip("x11vnc is not installed here (apt-get install x11vnc)")
    base = eng.image("full")
    st = os.stat("/usr/bin/x11vnc")
    h = hashlib.sha256(("console v1 %s %d %d" % (base, st.st_size, int(st.st_mtime))).encode()).hexdigest()[:16]
    tag = "localhost/mcp-relay-test-console:" + h
    if subprocess.run(eng.cli + ["image", "inspect", tag], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return tag
    ctx = tempfile.mkdtemp(prefix="relay-console-image-")
    try:
        root = os.path.join(ctx, "root")
        os.makedirs(root)
        for path in ["/usr/bin/x11vnc"] + docker_support._libs_of("/usr/bin/x11vnc"):
            for p in {path, os.path.realpath(path)}:
                dst = root + p
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if not os.path.exists(dst):
                    shutil.copy2(os.path.realpath(p), dst)
        with open(os.path.join(ctx, "Containerfile"), "w") as f:
            f.write("FROM %s\nCOPY root/ /\n" % base)
        argv = ["build", "--network", "none", "-f", os.path.join(ctx, "Containerfile"), "-t", tag, ctx]
        r = subprocess.run(eng.cli + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return tag


def rfb_in(pid):
    """The RFB handshake with 127.0.0.1:5900 in the network namespace of `pid`."""
    r = subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % pid, sys.executable, "-c", RFB_PROBE],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip().splitlines()[-1:]}


def open_args(guest, console_id, attempt_id):
    return {"guest": guest, "console_id": console_id, "attempt_id": attempt_id, "userRequested": True,
            "reason": "the user asked to watch the guest's display", "expected": "an empty X screen"}


def test_console_on_a_local_engine(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    if not shutil.which("nsenter"):
        skip("nsenter is not installed (util-linux)")
    with Engine() as eng:
        images = {"console": console_image(eng), "full": eng.image("full")}
        with eng.relay(binary, images) as r:
            r.initialize()
            caps = structured(r.call_tool("relay_acquisition_capabilities", {}, timeout=60))
            linux = caps["options"]["vnc"]["backends"]["linux"]
            assert linux["available"] is True and linux["backend"] == "x11vnc", caps
            assert linux["server_enforced_view_only"] is True and linux["viewer_location"] == "service-host", caps
            assert caps["options"]["vnc"]["backends"]["macos"]["available"] is False, caps
            probe = json.dumps(structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120)))
            assert "on: x11vnc on the guest's display" in probe, probe
            assert "off: the image has no x11vnc" in probe, probe

            # An image without x11vnc: refused by the plugin with the reason, nothing made.
            bad = r.call_tool("relay_acquire", {"task": "novnc", "image": "full", "extractions": [], "vnc": True},
                              timeout=300)
            assert bad["isError"] and "no /usr/bin/x11vnc" in text_of(bad), text_of(bad)
            assert eng.containers(store=docker_support.store_of(r)) == []

            acq = acquire(r, "console", task="vnc", vnc=True)
            g, vm = acq["guest"], acq["vm"]
            console_id = acq["console"]["console_id"]
            assert acq["console"]["status"] == "ready", acq
            res = structured(r.call_tool("relay_console_resolve", {"guest": g}, timeout=60))
            assert res["status"] == "ready" and res["backend"] == "x11vnc" and res["vm"] == vm, res
            assert res["server_enforced_view_only"] is True and res["pixels"] == "unverified", res
            assert res["authentication_mechanism"] == "one-time-password", res

            opened = r.call_tool("relay_console_open", open_args(g, console_id, "a1"), timeout=120)
            assert opened["isError"] is False, text_of(opened)
            rep = structured(opened)
            assert rep["attempt"]["status"] == "dispatching", rep
            assert rep["attempt"]["reason"] == "worker-unavailable", rep
            assert rep["status"] == "ready" and rep["source"] == "machine-docker", rep
            assert "password" not in json.dumps(rep).lower().replace("one-time-password", ""), rep
            # Where x11vnc listens, as the plugin reported it to console-vnc (machine-local's
            # fields; the relay's MCP answer leaves them out): the plugin's lease record.
            with open(os.path.join(docker_support.store_of(r), "leases", vm + ".json")) as f:
                rec = json.load(f)
            attempt = rec["consolePrivate"]["attempts"]["a1"]
            pid = eng.inspect(vm)["State"]["Pid"]
            assert attempt["endpoint"] == {"address": "127.0.0.1", "port": 5900,
                                           "networkNamespace": "/proc/%d/ns/net" % pid,
                                           "banner": "RFB 003.008"}, attempt
            assert "viewerPid" not in attempt, attempt
            assert rec["console"]["console_id"] == console_id and rec["console"]["status"] == "ready", rec

            hs = rfb_in(pid)
            assert hs.get("banner", "").startswith("RFB 003.00"), hs
            assert hs["security"] == [2], hs  # VNC authentication only: the password is required
            # x11vnc read its one-time password file and removed it ("rm:").
            listing = sh(r, g, "ls -a /tmp")
            assert [n for n in listing.split() if n.startswith(".relay-vnc-") and not n.endswith(".log")] == [], \
                listing
            # A second open while a1 is active is refused; the same id answers its report.
            again = r.call_tool("relay_console_open", open_args(g, console_id, "a1"), timeout=60)
            assert again["isError"] is False and structured(again)["attempt"]["attempt_id"] == "a1", text_of(again)
            other = r.call_tool("relay_console_open", open_args(g, console_id, "a2"), timeout=60)
            assert other["isError"] is True and "a1" in text_of(other), text_of(other)

            can = r.call_tool("relay_console_cancel", {"guest": g, "console_id": console_id, "attempt_id": "a1"},
                              timeout=60)
            assert can["isError"] is False, text_of(can)
            assert structured(can)["attempt"]["status"] == "cancelled", structured(can)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "banner" in rfb_in(pid):
                time.sleep(0.2)
            assert "banner" not in rfb_in(pid), "x11vnc still answers after cancel"

            rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
            assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
            assert eng.inspect(vm) is None


VIEWER = r"""#!%s
import json, os, socket, sys, time
out = os.environ["RELAY_TEST_VIEWER_OUT"]
s = socket.create_connection(("127.0.0.1", 5900), timeout=5)
pw, pwfile = os.environ.get("VNC_PASSWORD", ""), os.environ.get("MCP_RELAY_VNC_PASSWORD_FILE")
with open(pwfile) as f:
    in_file = f.read().strip()
with open(out + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[1:], "banner": s.recv(12).decode(), "pwlen": len(pw), "pwfile": pwfile,
               "same": in_file == pw, "mode": oct(os.stat(pwfile).st_mode & 0o777)}, f)
os.replace(out + ".tmp", out)
time.sleep(600)
"""


def proc_state(pid):
    """The state letter of process `pid` on this host, or None when there is none."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return None


def test_console_viewer(binary):
    """MCP_RELAY_VNC_VIEWER: the viewer runs on this host in the container's network namespace,
    reaches x11vnc at 127.0.0.1:5900 there and gets the one-time password; release stops it and
    removes its password file."""
    why = plugin_missing(binary)
    if why:
        skip(why)
    d = tempfile.mkdtemp(prefix="relay-console-viewer-")
    try:
        viewer, out = os.path.join(d, "viewer"), os.path.join(d, "viewer.json")
        with open(viewer, "w") as f:
            f.write(VIEWER % sys.executable)
        os.chmod(viewer, 0o755)
        with Engine() as eng:
            with eng.relay(binary, {"console": console_image(eng)}, MCP_RELAY_VNC_VIEWER=viewer,
                           RELAY_TEST_VIEWER_OUT=out) as r:
                r.initialize()
                acq = acquire(r, "console", task="vnc", vnc=True)
                g, vm = acq["guest"], acq["vm"]
                opened = r.call_tool("relay_console_open", open_args(g, acq["console"]["console_id"], "v1"),
                                     timeout=120)
                assert opened["isError"] is False, text_of(opened)
                assert structured(opened)["attempt"]["status"] == "launched", structured(opened)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not os.path.exists(out):
                    time.sleep(0.1)
                with open(out) as f:
                    seen = json.load(f)
                assert seen["argv"] == ["127.0.0.1::5900"] and seen["banner"].startswith("RFB 003.00"), seen
                assert seen["pwlen"] == 8 and seen["same"] is True and seen["mode"] == "0o600", seen
                with open(os.path.join(docker_support.store_of(r), "leases", vm + ".json")) as f:
                    vpid = json.load(f)["consolePrivate"]["attempts"]["v1"]["viewerPid"]
                assert proc_state(vpid) not in (None, "Z"), "the viewer is not running"
                rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
                assert not os.path.exists(seen["pwfile"]), "the viewer's password file outlived the lease"
                assert proc_state(vpid) in (None, "Z"), "the viewer outlived the release"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_remote_endpoint_refuses_vnc(binary):
    """A tcp:// engine (dockerd with TLS client certificates, as test_docker_tls.py) counts as on
    another host: linux VNC unavailable, relay_probe says why for an image that has x11vnc, and
    relay_acquire with vnc is refused before anything is made."""
    why = plugin_missing(binary) or docker_support.dockerd_missing()
    if why:
        skip(why)
    if not shutil.which("openssl"):
        skip("openssl is not installed (apt-get install openssl)")
    import test_docker_tls
    d = test_docker_tls.certificates()
    try:
        with Engine("docker", tls=d) as eng:
            images = {"console": console_image(eng)}
            with eng.relay(binary, images, extra_options=test_docker_tls.tls_options(d, eng)) as r:
                r.initialize()
                caps = r.call_tool("relay_acquisition_capabilities", {}, timeout=60)
                assert caps["isError"] is False, text_of(caps)
                linux = structured(caps)["options"]["vnc"]["backends"]["linux"]
                assert linux["available"] is False and linux["status"] == "unavailable", linux
                probe = json.dumps(structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120)))
                assert "off: the image has x11vnc, but the engine is on another host" in probe, probe
                bad = r.call_tool("relay_acquire", {"task": "vnc", "image": "console", "extractions": [],
                                                    "vnc": True}, timeout=300)
                assert bad["isError"] and "console-unavailable" in text_of(bad), text_of(bad)
                assert eng.containers(store=docker_support.store_of(r)) == []
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
