"""delivery_support: what the delivery integration tests share (test_delivery_*.py: background
step downloads, relay_extract, relay_finish, release packaging, the package on disk).

They drive the real mcp-relay binary (relay_client.Relay) over the fault shim
tests/plugins/machine-faultshim wrapping plugins/reference-machine, loaded through the real
loader; reference-machine's "guest" is this host and its guest root a folder under /var/tmp, so
the guest receiver really runs. The shim's script is the control file (write_control({"faults":
[...], "leaseExtra": {...}})), read again at every operation. With `capture=True` an environment
profile puts the shim in the machine slot and capture-x11 in the capture slot, and an Xvfb
display (its number in the lease's "display", the shim's leaseExtra) gives real snapshots.

    env = DeliveryEnv(binary, capture=True)     # skips when the shim (or Xvfb) is missing
    with env.relay() as r:
        r.initialize()
        g = env.acquire(r, extractions=[...])["guest"]
        env.stage(r, g)
        res = env.run(r, g, "echo hi")
        env.wait_downloads(r, g, lambda d: d["downloaded"] >= 1)
        fin = r.call_tool("relay_finish", {"guest": g})
    env.cleanup()

Machine-local (MCP_RELAY_BACKEND=local) is used instead when `local=True` and it can run here
(root, namespaces, overlayfs).
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from relay_client import Relay, Skip, skip
from support_common import build_dir, events, namespaces_missing, plugin_so, shim_so, structured, text_of  # noqa: F401 (re-exported)
from support_common import NO_SERVE, serve_pids_script

TIMEOUT = 120


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Xvfb:
    """A private X display for capture-x11 (relay-x11shot reads it)."""

    def __init__(self):
        if not shutil.which("Xvfb"):
            skip("Xvfb is not installed (Debian: xvfb); snapshots need an X display")
        for n in range(71, 140):
            if not os.path.exists("/tmp/.X11-unix/X%d" % n) and not os.path.exists("/tmp/.X%d-lock" % n):
                break
        self.display = ":%d" % n
        self.proc = subprocess.Popen(["Xvfb", self.display, "-screen", "0", "320x200x24", "-nolisten", "tcp", "-noreset"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while not os.path.exists("/tmp/.X11-unix/X%d" % n):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                skip("Xvfb %s did not start" % self.display)
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class CheckedRelay(Relay):
    """A Relay whose standard error is checked, once the process has exited, for reports of
    AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer (RELAY_SANITIZE=ON builds)."""

    def close(self):
        if self.proc.poll() is None:
            try:
                self.close_stdin()
                self.proc.wait(timeout=60)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        super().close()
        bad = [line for line in text.splitlines() if "Sanitizer" in line or "runtime error:" in line]
        if bad:
            raise AssertionError("the relay's standard error reports:\n" + "\n".join(text.splitlines()[-60:]))


class DeliveryEnv:
    """The folders, backend and (optionally) X display of one delivery test."""

    def __init__(self, binary, capture=False, local=False, project=None):
        self.binary = binary
        self.local = local
        self.xvfb = None
        if local:
            why = namespaces_missing()
            if why:
                skip(why)
            if not os.path.exists(plugin_so(binary, "machine-local")):
                skip("machine-local.so is not built")
        else:
            for so in (shim_so(binary), plugin_so(binary, "reference-machine")):
                if not os.path.exists(so):
                    skip("%s is not built; build its target" % so)
        self.root = tempfile.mkdtemp(prefix="relay-dl-")
        os.chmod(self.root, 0o700)
        self.state_dir = os.path.join(self.root, "state")
        self.project = project or os.path.join(self.root, "project")
        os.makedirs(self.state_dir, mode=0o700)
        os.makedirs(self.project, mode=0o700, exist_ok=True)
        self.control = os.path.join(self.root, "control.json")
        self.log = os.path.join(self.root, "ops.jsonl")
        self.extra_env = {}
        control = {"faults": []}
        if capture and not local:
            if not os.path.exists(plugin_so(binary, "capture-x11")):
                skip("capture-x11.so is not built")
            self.xvfb = Xvfb()
            control["leaseExtra"] = {"display": self.xvfb.display}
            self.extra_env["VM_ENVIRONMENT_FILE"] = self._profile(
                {"machine": shim_so(binary), "capture": "capture-x11"})
        self.write_control(control)

    @property
    def image(self):
        """The image the backend offers: machine-local's "local", reference-machine's "folder"."""
        return "local" if self.local else "folder"

    def lease_files(self):
        """The leases reference-machine holds (its guests' lease.json), by vm."""
        root = os.path.join(self.state_dir, "plugins", "machine-faultshim", "guests")
        return {vm: os.path.join(root, vm, "lease.json") for vm in (os.listdir(root) if os.path.isdir(root) else [])
                if os.path.exists(os.path.join(root, vm, "lease.json"))}

    def _profile(self, plugins):
        """An environment profile whose relayPlugins choose the plugins of each slot."""
        env = os.path.join(self.root, "env")
        repo = os.path.join(self.root, "repo")
        os.makedirs(os.path.join(repo, "images"))
        bindir = os.path.join(self.root, "bin")
        os.makedirs(bindir)
        for name in ("machctl", "tart"):
            p = os.path.join(bindir, name)
            with open(p, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(p, 0o755)
        self.state_dir = os.path.join(env, "relay")  # the profile's relay state folder wins
        profile = {"schemaVersion": 2, "id": "delivery", "vmServiceUrl": "http://127.0.0.1:6299",
                   "imageRepository": repo, "tartHome": os.path.join(env, "tart"),
                   "serviceStateDir": os.path.join(env, "service"),
                   "imageStateDir": os.path.join(env, "images"),
                   "relayStateDir": self.state_dir, "machctlPath": os.path.join(bindir, "machctl"),
                   "tartPath": os.path.join(bindir, "tart"), "relayPlugins": plugins}
        path = os.path.join(self.root, "profile.json")
        with open(path, "w") as f:
            json.dump(profile, f)
        return path

    def write_control(self, control):
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            json.dump(control, f)
        os.replace(tmp, self.control)

    def env(self, **extra):
        e = {"MCP_RELAY_BACKEND": "local" if self.local else shim_so(self.binary),
             "MCP_RELAY_SESSION": "delivery",
             "MCP_RELAY_FAULTSHIM_PLUGIN": plugin_so(self.binary, "reference-machine"),
             "MCP_RELAY_FAULTSHIM_CONTROL": self.control,
             "MCP_RELAY_FAULTSHIM_LOG": self.log,
             "HOME": self.root}
        e.update(self.extra_env)
        e.update({k: (None if v is None else str(v)) for k, v in extra.items()})
        return e

    def relay(self, **extra):
        return CheckedRelay(self.binary, env=self.env(**extra), state_dir=self.state_dir,
                            project=self.project)

    def cleanup(self):
        if self.xvfb:
            self.xvfb.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- tools ----------------------------------------------------------------
    def acquire(self, r, **overrides):
        args = {"task": "dl", "image": self.image, "extractions": []}
        args.update(overrides)
        res = r.call_tool("relay_acquire", args, timeout=TIMEOUT)
        assert res["isError"] is False, text_of(res)
        return structured(res)

    def stage(self, r, guest, **args):
        a = {"guest": guest}
        a.update(args)
        res = r.call_tool("relay_stage", a, timeout=TIMEOUT + 120)
        assert res["isError"] is False, text_of(res)
        return structured(res)

    def run(self, r, guest, code, expect_ok=True, **extra):
        args = {"guest": guest, "language": "shell", "inline": True, "code": code}
        args.update(extra)
        res = r.call_tool("relay_script", args, timeout=TIMEOUT + 60)
        if expect_ok:
            assert structured(res).get("executionFailed") is False, text_of(res)
        return res

    def diag(self, r, guest, code):
        """A diagnostic shell script (bypasses the receiver); returns its output, exit 0 required."""
        args = {"guest": guest, "language": "shell", "inline": True, "code": code, "diagnostic": True,
                "timeoutMs": 60000}
        res = r.call_tool("relay_script", args, timeout=TIMEOUT)
        s = structured(res)
        assert s.get("outcome", {}).get("exitStatus", {}).get("code") == 0, text_of(res)
        return s.get("output", "")

    def status_guest(self, r, guest):
        s = structured(r.call_tool("relay_status"))
        for g in s["guests"]:
            if g["guest"] == guest:
                return g
        return None

    def wait_downloads(self, r, guest, predicate, timeout=60, what="the expected downloads"):
        deadline = time.monotonic() + timeout
        while True:
            g = self.status_guest(r, guest)
            if g is not None and predicate(g["downloads"]):
                return g["downloads"]
            if time.monotonic() > deadline:
                raise AssertionError("downloads never showed %s: %s" % (what, g and g["downloads"]))
            time.sleep(0.05)


# A compromised resident receiver (runs in the guest as `R/receiver serve`, Python standard
# library only): it sits between the host's channel and the real `receiver.real serve`, hands it
# every request and answer unchanged, except the commands serve runs itself (archive, remove),
# which it runs by the wrapper on disk and answers itself, framed as serve does (spec/guest.md
# §16.2 items 2 and 3: a JSON line naming each part's bytes, then the parts).
SERVE_PROXY = r'''
import hashlib, json, os, subprocess, sys
real, args = sys.argv[1], sys.argv[2:]
wrapper = os.path.join(os.path.dirname(real), "receiver")
host_in, host_out = sys.stdin.buffer, sys.stdout.buffer
serve = subprocess.Popen([real] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def exactly(f, n):
    data = f.read(n)
    if len(data) != n:
        sys.exit(0)
    return data
def following(line):
    return sum(int(p["bytes"]) for p in json.loads(line).get("parts") or [])
def part(name, data):
    return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
while True:
    line = host_in.readline()
    if not line:
        break
    body = exactly(host_in, following(line))
    argv = (json.loads(line).get("command") or {}).get("argv")
    if argv and argv[0] in ("archive", "remove"):
        p = subprocess.run([wrapper] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        frame = {"commandExit": {"code": p.returncode, "signal": None},
                 "parts": [part("stdout", p.stdout), part("stderr", p.stderr)]}
        host_out.write(json.dumps(frame).encode() + b"\n" + p.stdout + p.stderr)
        host_out.flush()
        continue
    serve.stdin.write(line + body)
    serve.stdin.flush()
    answer = serve.stdout.readline()
    if not answer:
        break
    host_out.write(answer + exactly(serve.stdout, following(answer)))
    host_out.flush()
'''


def replace_receiver(env, r, guest, root, wrapper, then="", resident=False):
    """Puts the shell script `wrapper` in the guest's R/receiver, the way a compromised guest
    would, after copying the real one to R/receiver.real (which the wrapper hands commands to),
    and runs the shell lines `then` afterwards.

    A resident `receiver serve` (spec/guest.md §17) runs the step downloads' commands in its own
    process, never the file on disk; so the serve that runs now is ended, and the wrapper answers
    the next serve either as a receiver without it does (every later command reaches the wrapper
    by the one-shot path, §16.2), or, with `resident`, with SERVE_PROXY over the real serve (the
    commands reach the wrapper, their answers the host over the resident channel). A guest
    without a resident receiver (the shim over reference-machine) has no serve to end."""
    body = wrapper.split("\n", 1)[1] if wrapper.startswith("#!") else wrapper
    pids = [x for x in str(env.diag(r, guest, serve_pids_script(root))).split() if x.isdigit()]
    on_serve = ('if [ "$1" = serve ]; then exec python3 "$(dirname "$0")/.serve-proxy.py" '
                '"$(dirname "$0")/receiver.real" "$@"; fi\n' if resident else NO_SERVE)
    env.diag(r, guest, "set -e\ncp %(R)s/receiver %(R)s/receiver.real\n"
             "cat > %(R)s/.serve-proxy.py <<'RELAY_EOF'\n%(proxy)s\nRELAY_EOF\n"
             "cat > %(R)s/receiver.tmp <<'RELAY_EOF'\n#!/bin/sh\n%(on_serve)s%(sh)sRELAY_EOF\n"
             "chmod 700 %(R)s/receiver.tmp\nmv %(R)s/receiver.tmp %(R)s/receiver\n%(then)s\n"
             % {"R": root, "proxy": SERVE_PROXY, "on_serve": on_serve, "sh": body, "then": then})
    if pids:
        # Ended from a diagnostic of its own: the answer of the script that ends serve may be lost
        # with it (the host then reports it from the guest's record or as uncertain).
        r.call_tool("relay_script", {"guest": guest, "language": "shell", "inline": True, "diagnostic": True,
                                     "code": "kill -9 %s" % " ".join(pids), "timeoutMs": 60000}, timeout=TIMEOUT)


def variants(binary, kinds=("shim", "local"), **kw):
    """Yields a DeliveryEnv per backend that can run here (the shim over reference-machine,
    machine-local), each
    cleaned up afterwards; prints why one cannot run; skips the test when none can."""
    ran, why = 0, []
    for kind in kinds:
        try:
            env = DeliveryEnv(binary, local=(kind == "local"), **kw)
        except Skip as e:
            print("  [%s] skipped: %s" % (kind, e), flush=True)
            why.append("%s: %s" % (kind, e))
            continue
        print("  [%s]" % kind, flush=True)
        try:
            yield env
            ran += 1
        finally:
            env.cleanup()
    if ran == 0:
        skip("no backend can run here (%s)" % "; ".join(why))


# -- the package on disk -----------------------------------------------------------------

def files_under(root):
    """Every non-folder path below root (relative, sorted), links included."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def download_records(evidence):
    folder = os.path.join(evidence, "host", "evidence-downloads")
    out = {}
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue  # a durable write's temporary file
            with open(os.path.join(folder, name)) as f:
                rec = json.load(f)
            out[rec["executionId"]] = rec
    return out


def review(binary, folder, *args):
    """Runs `mcp-relay review [args] folder`; returns (exit status, parsed JSON or text, stderr)."""
    p = subprocess.run([binary, "review"] + list(args) + [folder], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    out = p.stdout.decode()
    try:
        data = json.loads(out)
    except ValueError:
        data = out
    return p.returncode, data, p.stderr.decode()


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_run(page, mode, out_dir):
    """Loads a local page in headless Chromium: mode "dump-dom" returns the rendered DOM,
    "screenshot" returns the PNG path."""
    browser = chromium()
    if browser is None:
        skip("Chromium is not installed (Debian: chromium); the viewer test needs a browser")
    profile = tempfile.mkdtemp(prefix="relay-chromium-", dir=out_dir)
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--user-data-dir=" + profile, "--allow-file-access-from-files"]
    if mode == "dump-dom":
        args += ["--dump-dom", "file://" + page]
    else:
        shot = os.path.join(out_dir, "viewer.png")
        args += ["--screenshot=" + shot, "--window-size=1200,3000", "file://" + page]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                       stdin=subprocess.DEVNULL)
    if mode == "dump-dom":
        assert p.returncode == 0 and p.stdout, p.stderr.decode()[-2000:]
        return p.stdout.decode()
    assert os.path.exists(shot), p.stderr.decode()[-2000:]
    return shot
