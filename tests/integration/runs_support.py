"""runs_support: what the runs integration tests share (test_runs_*.py: relay_stage,
relay_script, relay_probe scope guest).

Each test runs against every backend variant that can run here:

  shim   tests/plugins/machine-faultshim over plugins/reference-machine (MCP_RELAY_BACKEND=
         <machine-faultshim.so>, MCP_RELAY_FAULTSHIM_PLUGIN=<reference-machine.so>): the guest is
         this host, its guest root a folder under /var/tmp; the shim's script is the control file
         ({"faults": [...], "leaseExtra": {...}}); always available once built.
  local  machine-local (MCP_RELAY_BACKEND=local): a Linux namespace sandbox; needs root,
         namespaces and overlayfs.
  service  machine-service against tests/fixtures/machine-service-standin (its own exec, push
         and pull: one command per machine at a time, no guest-side facts, so trees go as
         archives and files are checked by receiver scans), capture-cua with the stand-in's
         fake cua-driver; needs machine-service.so and the stand-in.
  x11    the shim with capture-x11 (an environment profile) and a real Xvfb on this host
         whose display the shim adds to the leases ("leaseExtra"): snapshots on; needs Xvfb,
         capture-x11.so and relay-x11shot.
  ssh    the shim's leases carrying an "ssh" object (its script's "leaseExtra"), reached
         through transfer-ssh by a real sshd on 127.0.0.1 (an environment profile puts
         the shim in the machine slot and transfer-ssh in the transport slot); needs root,
         sshd, ssh, ssh-keygen and transfer-ssh.so.

    for v in variants(binary):            # yields only the variants that can run
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)              # the acquire result (guest, guestRoot, ...)
            ...
    # a variant that cannot run prints "  [ssh] skipped: <why>"; when none can, the test skips.
    # RELAY_RUNS_VARIANTS=shim,ssh limits the variants tried.

Helpers talk to the guest only through the relay (diagnostic shell scripts), so every check
works the same on every variant.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from relay_client import NotSelected, Relay, skip, strict_skips
from support_common import build_dir, events, full, shim_so, lead_headline_rest, namespaces_missing, plugin_so, sha256_hex, structured, text_of  # noqa: F401 (re-exported)

ACQUIRE = {"task": "runs", "image": "ubuntu2404", "extractions": []}
# The image each backend offers (the stand-in's is ACQUIRE's).
IMAGES = {"local": "local", "shim": "folder", "x11": "folder", "ssh": "folder", "ssh-x11": "folder"}
SHIM_KINDS = ("shim", "x11", "ssh", "ssh-x11")


class Variant:
    """One backend variant: its folders, its relay, its cleanup."""

    def __init__(self, binary, kind):
        self.binary = binary
        self.kind = kind
        # Transports with RELAY_TRANSPORT_STDIO_BYTES run in one round trip and bring the
        # after-image home on the run's answer (spec/guest.md §16.2, §16.3).
        self.one_trip = kind in ("local", "ssh", "ssh-x11")
        self.display = None
        self.sshd_env = {}
        self.root = tempfile.mkdtemp(prefix="relay-runs-%s-" % kind)
        os.chmod(self.root, 0o700)
        self.state_dir = os.path.join(self.root, "state")
        self.project = os.path.join(self.root, "project")
        for d in (self.state_dir, self.project):
            os.makedirs(d, mode=0o700)
        self.control = os.path.join(self.root, "control.json")
        self.log = os.path.join(self.root, "ops.jsonl")
        self.guest_roots = []
        self.sshd = None
        self.xvfb = None
        self.standin = None
        self.extra_env = {}
        self.write_control({"faults": []})

    # -- setup ---------------------------------------------------------------
    def write_control(self, control):
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            json.dump(control, f)
        os.replace(tmp, self.control)

    def env(self, **extra):
        e = {"HOME": self.root, "MCP_RELAY_FAULTSHIM_CONTROL": self.control, "MCP_RELAY_FAULTSHIM_LOG": self.log,
             "MCP_RELAY_FAULTSHIM_PLUGIN": plugin_so(self.binary, "reference-machine")}
        if self.kind == "shim":
            e["MCP_RELAY_BACKEND"] = shim_so(self.binary)
        elif self.kind == "local":
            e["MCP_RELAY_BACKEND"] = "local"
        elif self.kind == "service":
            e["MCP_RELAY_BACKEND"] = "machine-service"
            e["MCP_RELAY_URL"] = self.standin.url
            e["MCP_RELAY_MACHINE_SERVICE_OPTIONS"] = '{"destructionCheck":"service"}'
        e.update(self.extra_env)
        e.update({k: (None if v is None else str(v)) for k, v in extra.items()})
        return e

    def relay(self, **extra):
        return Relay(self.binary, env=self.env(**extra), state_dir=self.state_dir, project=self.project)

    def acquire(self, r, **overrides):
        args = dict(ACQUIRE)
        args["image"] = IMAGES.get(self.kind, args["image"])
        args.update(overrides)
        res = r.call_tool("relay_acquire", args, timeout=120)
        assert res["isError"] is False, text_of(res)
        g = structured(res)
        self.guest_roots.append(g["guestRoot"])
        return g

    # -- the shim's operation log (a line when a call begins, "<op>:end" when it ends) ----
    def ops(self):
        out = []
        try:
            with open(self.log) as f:
                for line in f:
                    if line.strip():
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
        return out

    def cleanup(self):
        if self.sshd is not None:
            try:
                os.killpg(self.sshd.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                self.sshd.wait(timeout=5)
            except Exception:
                pass
        if self.standin is not None:
            try:
                self.standin.stop()
            except Exception:
                pass
        if self.xvfb is not None:
            self.xvfb.terminate()
            try:
                self.xvfb.wait(timeout=5)
            except Exception:
                self.xvfb.kill()
        for root in self.guest_roots:
            # shim and ssh guest roots are folders of this host
            if root.startswith("/var/tmp/") and "mcp-relay-relay-" in root and self.kind != "local":
                shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _start_sshd(v):
    """A throwaway sshd for root on 127.0.0.1 (as tests/unit/plugins/transfer-ssh/transfer_ssh_fixture.h)."""
    d = os.path.join(v.root, "sshd")
    os.makedirs(d, mode=0o700)
    host_key, user_key = os.path.join(d, "host_key"), os.path.join(d, "user_key")
    for key, comment in ((host_key, "relay-test-host"), (user_key, "relay-test-user")):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key], check=True)
    shutil.copy(user_key + ".pub", os.path.join(d, "authorized_keys"))
    port = _free_port()
    # Sessions get a HOME of their own (empty): the machine's own rc files (here root's
    # ~/.bashrc runs `pyenv init`, 100-600 ms a session, and leaves a lock behind when a
    # session is killed) never run, so sessions cost what they cost on a plain guest.
    # RELAY_RUNS_SSH_LOGIN_HOME=1 keeps the login's own HOME (bench/runs measures both).
    home = os.path.join(d, "home")
    os.makedirs(home, mode=0o700)
    session_env = [] if os.environ.get("RELAY_RUNS_SSH_LOGIN_HOME") == "1" else ["HOME=%s" % home]
    session_env += ["%s=%s" % kv for kv in getattr(v, "sshd_env", {}).items()]  # what guest sessions see (bench/runs)
    set_home = "SetEnv %s\n" % " ".join(session_env) if session_env else ""
    config = os.path.join(d, "sshd_config")
    with open(config, "w") as f:
        f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nUsePAM no\nPermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "AuthorizedKeysFile %s/authorized_keys\nStrictModes no\nPidFile %s/sshd.pid\n"
                "MaxSessions 64\nMaxStartups 64\nSubsystem sftp internal-sftp\n%s"
                % (port, host_key, d, d, set_home))
    with open(host_key + ".pub") as f:
        pub = " ".join(f.read().split()[:2])
    known = os.path.join(d, "known_hosts")
    with open(known, "w") as f:
        f.write("[127.0.0.1]:%d %s\n" % (port, pub))
    os.makedirs("/run/sshd", exist_ok=True)
    log = open(os.path.join(d, "sshd.log"), "wb")
    v.sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", config], stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise AssertionError("sshd did not start on port %d" % port)
    return {"host": "127.0.0.1", "port": port, "user": "root", "identityFile": user_key,
            "knownHostsFile": known}


def _write_profile(v, plugins):
    """An environment profile (spec/lifecycle.md §14) whose relayPlugins choose the plugins."""
    env = os.path.join(v.root, "env")
    repo = os.path.join(v.root, "repo")
    os.makedirs(os.path.join(repo, "images"))
    bindir = os.path.join(v.root, "bin")
    os.makedirs(bindir)
    for name in ("machctl", "tart"):
        p = os.path.join(bindir, name)
        with open(p, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(p, 0o755)
    profile = {"schemaVersion": 2, "id": "runs-" + v.kind, "vmServiceUrl": "http://127.0.0.1:6299",
               "imageRepository": repo, "tartHome": os.path.join(env, "tart"),
               "serviceStateDir": os.path.join(env, "service"), "imageStateDir": os.path.join(env, "images"),
               "relayStateDir": os.path.join(env, "relay"), "machctlPath": os.path.join(bindir, "machctl"),
               "tartPath": os.path.join(bindir, "tart"), "relayPlugins": plugins}
    path = os.path.join(v.root, "profile.json")
    with open(path, "w") as f:
        json.dump(profile, f)
    return path


def _start_xvfb(v, screen="640x480x24"):
    """Xvfb on a free display number; returns ":N"."""
    for n in range(90, 140):
        if os.path.exists("/tmp/.X11-unix/X%d" % n) or os.path.exists("/tmp/.X%d-lock" % n):
            continue
        log = open(os.path.join(v.root, "xvfb.log"), "wb")
        v.xvfb = subprocess.Popen(["Xvfb", ":%d" % n, "-screen", "0", screen, "-nolisten", "tcp"],
                                  stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and v.xvfb.poll() is None:
            if os.path.exists("/tmp/.X11-unix/X%d" % n):
                return ":%d" % n
            time.sleep(0.05)
        v.xvfb.kill()
        v.xvfb.wait()
        v.xvfb = None
    raise AssertionError("Xvfb did not start on any display from :90 to :139")


def make_variant(binary, kind, sshd_env=None):
    """The variant, or (None, why it cannot run here). `sshd_env`: variables the sshd fixture
    sets in every guest session."""
    for so in (shim_so(binary), plugin_so(binary, "reference-machine")):
        if not os.path.exists(so) and kind in SHIM_KINDS:
            return None, "%s is not built" % so
    if kind == "local":
        why = namespaces_missing()
        if why:
            return None, why
        if not os.path.exists(plugin_so(binary, "machine-local")):
            return None, "machine-local.so is not built"
    if kind in ("ssh", "ssh-x11"):
        if os.geteuid() != 0:
            return None, "the sshd fixture needs root"
        if not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
            return None, "sshd, ssh or ssh-keygen is missing (openssh-server, openssh-client)"
        if not os.path.exists(plugin_so(binary, "transfer-ssh")):
            return None, "transfer-ssh.so is not built"
    if kind == "service":
        import service_support
        if not os.access(service_support.standin_binary(binary), os.X_OK):
            return None, "machine-service-standin is not built"
        if not os.path.exists(plugin_so(binary, "machine-service")):
            return None, "machine-service.so is not built"
    if kind in ("x11", "ssh-x11"):
        if not shutil.which("Xvfb"):
            return None, "Xvfb is missing (apt-get install xvfb)"
        if not os.path.exists(plugin_so(binary, "capture-x11")):
            return None, "capture-x11.so is not built"
        platform = "linux-aarch64" if os.uname().machine in ("aarch64", "arm64") else "linux-x86_64"
        shot = os.path.join(build_dir(binary), "libexec", "mcp-relay", "receivers", platform, "relay-x11shot")
        if not os.path.exists(shot):
            return None, "relay-x11shot is not built (%s)" % shot
    v = Variant(binary, kind)
    v.sshd_env = dict(sshd_env or {})
    if kind == "service":
        import service_support
        try:
            v.standin = service_support.Standin(binary)
        except Exception as e:  # noqa: BLE001
            v.cleanup()
            return None, "the stand-in could not start: %s" % e
    if kind == "x11":
        try:
            display = _start_xvfb(v)
        except Exception as e:  # noqa: BLE001
            v.cleanup()
            return None, str(e)
        v.display = display
        v.write_control({"faults": [], "leaseExtra": {"display": display}})
        v.extra_env["VM_ENVIRONMENT_FILE"] = _write_profile(
            v, {"machine": shim_so(binary), "capture": "capture-x11"})
    if kind == "ssh":
        try:
            ssh = _start_sshd(v)
        except Exception as e:  # noqa: BLE001
            v.cleanup()
            return None, "sshd could not start: %s" % e
        v.write_control({"faults": [], "leaseExtra": {"ssh": ssh}})
        v.extra_env["VM_ENVIRONMENT_FILE"] = _write_profile(
            v, {"machine": shim_so(binary), "transport": "transfer-ssh"})
    if kind == "ssh-x11":
        # GUI work over transfer-ssh: the sshd fixture's guest is this host, with a real
        # 1280x800 Xvfb as its display and capture-x11 for the snapshots.
        try:
            ssh = _start_sshd(v)
            v.display = _start_xvfb(v, screen="1280x800x24")
        except Exception as e:  # noqa: BLE001
            v.cleanup()
            return None, "sshd or Xvfb could not start: %s" % e
        v.write_control({"faults": [], "leaseExtra": {"ssh": ssh, "display": v.display}})
        v.extra_env["VM_ENVIRONMENT_FILE"] = _write_profile(
            v, {"machine": shim_so(binary), "transport": "transfer-ssh", "capture": "capture-x11"})
    return v, None


def variants(binary, kinds=("shim", "local", "ssh", "service")):
    """Yields each variant that can run here (cleaned up afterwards); prints why others cannot.
    Skips the test when none can."""
    ran = 0
    reasons = []
    only = os.environ.get("RELAY_RUNS_VARIANTS")  # e.g. "shim,ssh" to run a subset
    for kind in kinds:
        if only and kind not in only.split(","):
            print("  [%s] skipped: not in RELAY_RUNS_VARIANTS=%s" % (kind, only), flush=True)
            reasons.append("%s: not selected" % kind)
            continue
        v, why = make_variant(binary, kind)
        if v is None and only and strict_skips():
            raise AssertionError("[%s] was selected (RELAY_RUNS_VARIANTS=%s) and cannot run here: %s"
                                 % (kind, only, why))
        if v is None:
            print("  [%s] skipped: %s" % (kind, why), flush=True)
            reasons.append("%s: %s" % (kind, why))
            continue
        print("  [%s]" % kind, flush=True)
        try:
            yield v
            ran += 1
        finally:
            v.cleanup()
    if ran == 0 and only and all(r.endswith(": not selected") for r in reasons):
        raise NotSelected("none of its variants (%s) is in RELAY_RUNS_VARIANTS=%s" % (", ".join(kinds), only))
    if ran == 0:
        skip("no backend variant can run here (%s)" % "; ".join(reasons))


# -- talking to a guest through the relay -----------------------------------------------

def diag(r, guest, code, timeout_ms=60000, **extra):
    """Runs a diagnostic shell script; returns the structured result."""
    args = {"guest": guest, "language": "shell", "inline": True, "code": code, "diagnostic": True,
            "timeoutMs": timeout_ms}
    args.update(extra)
    res = r.call_tool("relay_script", args, timeout=timeout_ms / 1000 + 60)
    return full(res)


def sh(r, guest, code):
    """Output of a diagnostic script that must exit 0."""
    s = diag(r, guest, code)
    assert s["outcome"].get("exitStatus", {}).get("code") == 0, s
    return s["output"]


def run(r, guest, code, language="shell", timeout=120, **extra):
    """A recorded inline run; returns the whole tool result."""
    args = {"guest": guest, "language": language, "inline": True, "code": code}
    args.update(extra)
    return r.call_tool("relay_script", args, timeout=timeout)


def stage(r, guest, progress_token=None, **args):
    a = {"guest": guest}
    a.update(args)
    return r.call_tool("relay_stage", a, timeout=300, progress_token=progress_token)


def write_tree(base, files):
    """files: {relative path: bytes or str}."""
    for rel, data in files.items():
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
