"""docker_support: what the machine-docker integration tests share (test_docker_*.py).

A real engine: Debian's Podman with its Docker-compatible API service, started by the test
itself on a socket of its own (`podman system service --time=0 unix://<dir>/podman.sock`) and
stopped at the end. Images are built here without a registry: a root tree assembled from this
host's own binaries (dash as /bin/sh, coreutils, and for "full" also bash, Python 3 and Xvfb
with their libraries) is imported with `podman import`, once per content hash, and the trees
are cached under /var/cache/mcp-relay-ci/machine-docker/ (RELAY_DOCKER_CACHE overrides).

    with Engine() as eng:                      # skips the test when no engine can run here
        img = eng.image("minimal")             # "localhost/mcp-relay-test-minimal:<hash>"
        with eng.relay(binary, images={"minimal": img}) as r:
            ...

The `podman` program is used only to set up (service, import) and to look at what the relay
did (inspect, ps) — never in the relay's data path.
"""

import hashlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time

from relay_client import Relay, skip
from support_common import build_dir, full, plugin_so, sha256_hex, structured, text_of  # noqa: F401 (re-exported)

CACHE = os.environ.get("RELAY_DOCKER_CACHE", "/var/cache/mcp-relay-ci/machine-docker")
LABEL = "io.mcp-relay."

MINIMAL_PROGRAMS = ["/bin/dash", "/usr/bin/uname", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/mkdir", "/usr/bin/rm",
                    "/usr/bin/chmod", "/usr/bin/sleep", "/usr/bin/id", "/usr/bin/env", "/usr/bin/true",
                    "/usr/bin/false", "/usr/bin/head", "/usr/bin/wc", "/usr/bin/mv", "/usr/bin/cp", "/usr/bin/touch",
                    "/usr/bin/sha256sum", "/usr/bin/stat", "/usr/bin/date", "/usr/bin/printf", "/usr/bin/tr",
                    "/usr/bin/dd", "/usr/bin/sort", "/usr/bin/basename", "/usr/bin/dirname", "/usr/bin/readlink",
                    "/usr/bin/mktemp", "/usr/bin/ln", "/usr/bin/tail", "/usr/bin/find"]
FULL_EXTRA = ["/usr/bin/bash", "/usr/bin/python3.11", "/usr/bin/Xvfb", "/usr/bin/xkbcomp"]
FULL_TREES = ["/usr/lib/python3.11", "/usr/share/X11/xkb", "/usr/lib/xorg"]


def _run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def engine_missing():
    """Why no engine can run here, or None."""
    if os.geteuid() != 0:
        return "the Podman fixture runs rootful and needs root"
    if not shutil.which("podman"):
        return "podman is not installed (apt-get install podman crun uidmap fuse-overlayfs)"
    if not shutil.which("curl"):
        return "curl is not installed (the tests look at the engine with it: apt-get install curl)"
    return None


def rootless_missing():
    """Why a rootless Podman service of this (ordinary) user cannot run here, or None."""
    if os.geteuid() == 0:
        return "a rootless engine runs as an ordinary user (run the test as root: it re-runs itself as relayci)"
    for prog in ("podman", "newuidmap", "newgidmap", "curl"):
        if not shutil.which(prog):
            return "%s is not installed (apt-get install podman uidmap curl)" % prog
    import pwd
    name = pwd.getpwuid(os.geteuid()).pw_name
    with open("/etc/subuid") as f:
        if not any(line.split(":")[0] == name for line in f):
            return "%s has no subordinate id range (usermod --add-subuids 100000-165535 --add-subgids " \
                   "100000-165535 %s)" % (name, name)
    return None


def dockerd_missing():
    if os.geteuid() != 0:
        return "the dockerd fixture needs root"
    for prog in ("dockerd", "docker", "containerd", "curl"):
        if not shutil.which(prog):
            return "%s is not installed (apt-get install docker.io)" % prog
    return None


def engines(kinds=None):
    """Yields each engine kind of `kinds` ("podman,docker"; RELAY_DOCKER_ENGINES when None) that
    can run here; skips the test when none can."""
    from relay_client import Skip
    ran, reasons = 0, []
    for kind in (kinds or os.environ.get("RELAY_DOCKER_ENGINES", "podman,docker")).split(","):
        try:
            eng = Engine(kind)
        except Skip as e:
            print("  [%s] skipped: %s" % (kind, e), flush=True)
            reasons.append("%s: %s" % (kind, e))
            continue
        print("  [%s]" % kind, flush=True)
        try:
            yield eng
            ran += 1
        finally:
            eng.close()
    if ran == 0:
        skip("no engine can run here (%s)" % "; ".join(reasons))


def _hybrid_cgroups():
    """True when /sys/fs/cgroup is a v1 (or hybrid) layout: crun refuses it, runc does not."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if parts[4] == "/sys/fs/cgroup":
                    return " - cgroup2 " not in line
    except OSError:
        pass
    return False


def _libs_of(path):
    out = _run(["ldd", path]).stdout
    libs = []
    for line in out.splitlines():
        for tok in line.split():
            if tok.startswith("/") and os.path.exists(tok):
                libs.append(tok)
    return libs


def _copy_into(root, src):
    dst = root + src
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.isdir(src) and not os.path.islink(src):
        if not os.path.exists(dst):
            shutil.copytree(src, dst, symlinks=True,
                            ignore=shutil.ignore_patterns("test", "tests", "__pycache__", "idlelib", "tkinter",
                                                          "dist-packages", "site-packages", "ensurepip"))
        return
    if not os.path.exists(dst):
        shutil.copy2(os.path.realpath(src), dst)


def _tree_files(kind):
    progs = list(MINIMAL_PROGRAMS)
    trees = []
    if kind == "full":
        progs += [p for p in FULL_EXTRA if os.path.exists(p)]
        trees = [t for t in FULL_TREES if os.path.isdir(t)]
    return progs, trees


def _image_hash(kind):
    progs, trees = _tree_files(kind)
    h = hashlib.sha256(b"docker_support image v2 " + kind.encode())
    for p in progs + trees:
        st = os.stat(p)
        h.update(("%s %d %d\n" % (p, st.st_size, int(st.st_mtime))).encode())
    return h.hexdigest()[:16]


def _build_tree(kind, root):
    progs, trees = _tree_files(kind)
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "tmp", "var/tmp", "home", "root", "proc", "sys",
              "dev", "run"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    # Debian's merged /usr, as on this host: /bin -> usr/bin and so on.
    for d in ("bin", "sbin", "lib", "lib64"):
        link = os.readlink("/" + d) if os.path.islink("/" + d) else None
        if link:
            os.symlink(link.lstrip("/"), os.path.join(root, d))
        else:
            os.makedirs(os.path.join(root, d), exist_ok=True)
    libs = set()
    for p in progs:
        _copy_into(root, p)
        libs.update(_libs_of(p))
    for t in trees:
        _copy_into(root, t)
    # Python's compiled modules have libraries of their own.
    if kind == "full":
        for dirpath, _, files in os.walk(root + "/usr/lib/python3.11/lib-dynload"):
            for name in files:
                libs.update(_libs_of(os.path.join(dirpath, name)))
    for lib in sorted(libs):
        _copy_into(root, lib)
        real = os.path.realpath(lib)
        if real != lib:
            _copy_into(root, real)
    os.symlink("dash", os.path.join(root, "usr/bin/sh"))
    if kind == "full":
        os.symlink("python3.11", os.path.join(root, "usr/bin/python3"))
    for d in ("tmp", "var/tmp"):
        os.chmod(os.path.join(root, d), 0o1777)
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nrelay:x:61000:61000:relay:/tmp:/bin/sh\n")
    with open(os.path.join(root, "etc/group"), "w") as f:
        f.write("root:x:0:\nrelay:x:61000:\n")


def _wait_socket(path, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
            r = _run(["curl", "-s", "--unix-socket", path, "http://d/_ping"])
            if r.stdout.strip() == "OK":
                return True
        time.sleep(0.1)
    return False


class Engine:
    """An engine of the test's own on a socket in a temporary folder: Podman's API service
    (kind "podman", the default), or Docker's dockerd with its own data root (kind "docker").
    RELAY_DOCKER_ENGINES=podman,docker names the kinds engines() yields."""

    def __init__(self, kind="podman", tls=None, host_mounts=False, rootless_dir=None):
        """`tls` (kind "docker"): a folder with ca.pem, server-cert.pem and server-key.pem; dockerd
        then listens on tcp://127.0.0.1:<self.tcp_port> too, with --tlsverify (client
        certificates signed by that CA only). `host_mounts` (kind "docker"): dockerd in this host's
        mount namespace instead of one of its own (test_docker_mounts.py shows why not).
        `rootless_dir` (kind "podman", run as an ordinary user): the user's own rootless Podman
        service, with its storage, run root and XDG_RUNTIME_DIR in that folder (never the
        user's default storage, which other runs may share)."""
        why = (rootless_missing() if rootless_dir else engine_missing()) if kind == "podman" else dockerd_missing()
        if why:
            skip(why)
        self.kind = kind
        self.rootless_dir = rootless_dir
        self.dir = tempfile.mkdtemp(prefix="relay-docker-", dir=rootless_dir)
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, kind + ".sock")
        self.endpoint = "unix://" + self.socket
        self.runtime = None
        self.log = open(os.path.join(self.dir, "service.log"), "wb")
        if kind == "docker":
            # dockerd in a mount namespace of its own, private from this host's: in the host's
            # namespace (where "/" is private here) dockerd makes its data root a shared mount,
            # so every container root under it is a peer of the copies any other process on
            # this machine gets when it makes a mount namespace without making it private —
            # and an unmount there propagates back and takes dockerd's view of a running
            # container's root away: its archive API then reads and writes an empty folder
            # (docs/machine-docker.md, "Known problems").
            argv = ([] if host_mounts else ["unshare", "--mount", "--propagation", "private"]) + [
                    "dockerd", "--host", self.endpoint, "--data-root", os.path.join(self.dir, "root"),
                    "--exec-root", os.path.join(self.dir, "exec"), "--pidfile", os.path.join(self.dir, "pid"),
                    "--iptables=false", "--ip6tables=false", "--bridge=none"]
            if tls:
                self.tcp_port = free_port()
                argv += ["--host", "tcp://127.0.0.1:%d" % self.tcp_port, "--tlsverify",
                         "--tlscacert", os.path.join(tls, "ca.pem"), "--tlscert", os.path.join(tls, "server-cert.pem"),
                         "--tlskey", os.path.join(tls, "server-key.pem")]
            self.cli = ["docker", "-H", self.endpoint]
        else:
            argv = ["podman"]
            if rootless_dir:
                run = os.path.join(rootless_dir, "run")
                os.makedirs(run, mode=0o700, exist_ok=True)
                os.environ["XDG_RUNTIME_DIR"] = run
                argv += ["--root", os.path.join(rootless_dir, "storage"),
                         "--runroot", os.path.join(rootless_dir, "rr")]  # Podman refuses one over 50 bytes
            if _hybrid_cgroups():
                if not shutil.which("runc"):
                    shutil.rmtree(self.dir, ignore_errors=True)
                    skip("this host mixes cgroup v1 and v2, where crun cannot start containers, and runc is "
                         "not installed (apt-get install runc)")
                self.runtime = "runc"
                argv += ["--runtime", "runc"]
            self.cli = list(argv)
            argv = argv + ["system", "service", "--time=0", self.endpoint]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        # A rootless service's first start makes its storage: slower.
        if not _wait_socket(self.socket, self.proc, seconds=120 if rootless_dir else 30):
            self.close()
            skip("the %s API service did not start (see its log)" % kind)
        self.podman = self.cli

    def close(self):
        # Whatever a failed test left of its guests goes with the engine's fixture (Podman's
        # storage outlives the service and is shared with other runs: only our stores).
        if self.proc.poll() is None:
            for store in getattr(self, "stores", []):
                try:
                    self.remove_all(store)
                except Exception:  # noqa: BLE001
                    pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if self.rootless_dir:
            # Rootless Podman keeps a pause process holding its user namespace: ours goes too.
            try:
                with open(os.path.join(self.rootless_dir, "run", "libpod", "tmp", "pause.pid")) as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        keep = os.environ.get("RELAY_DOCKER_KEEP_LOG")  # a folder to copy the engine's log into
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(os.path.join(self.dir, "service.log"),
                        os.path.join(keep, "%s-%s.log" % (self.kind, os.path.basename(self.dir))))
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- images ------------------------------------------------------------------
    def image(self, kind):
        """The tag of the test image `kind` ("minimal" or "full"), imported when missing."""
        tag = "localhost/mcp-relay-test-%s:%s" % (kind, _image_hash(kind))
        if _run(self.cli + ["image", "inspect", tag], ).returncode == 0:
            return tag
        os.makedirs(CACHE, exist_ok=True)
        base = os.path.join(CACHE, "%s-%s" % (kind, _image_hash(kind)))
        tar = base + ".tar"
        if not os.path.exists(tar):
            # Tests in parallel may build the same image: each builds a tree of its own and the
            # last rename wins (one shared tree was built over by two at once).
            root = "%s.root-%d" % (base, os.getpid())
            shutil.rmtree(root, ignore_errors=True)
            _build_tree(kind, root)
            tmp = "%s.tmp-%d" % (tar, os.getpid())
            subprocess.run(["tar", "-C", root, "--numeric-owner", "-cf", tmp, "."], check=True)
            os.replace(tmp, tar)
            shutil.rmtree(root, ignore_errors=True)
        r = _run(self.cli + ["import", tar, tag])
        assert r.returncode == 0, r.stderr
        return tag

    # -- looking at what the relay did ----------------------------------------------
    def api(self, method, path, body=None):
        """One Engine API request through curl (the test's view, not the relay's)."""
        argv = ["curl", "-s", "-X", method, "--unix-socket", self.socket, "-w", "\n%{http_code}"]
        if body is not None:
            argv += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        r = _run(argv + ["http://d/v1.41" + path])
        text, _, code = r.stdout.rpartition("\n")
        try:
            data = json.loads(text) if text.strip() else None
        except ValueError:
            data = text
        return int(code or 0), data

    def containers(self, **labels):
        filt = {"label": ["%s%s=%s" % (LABEL, k.replace("_", "-"), v) for k, v in labels.items()]}
        code, data = self.api("GET", "/containers/json?all=1&filters=" + _quote(json.dumps(filt)))
        assert code == 200, (code, data)
        return data

    def inspect(self, name):
        code, data = self.api("GET", "/containers/%s/json" % name)
        return data if code == 200 else None

    def remove_all(self, store):
        for c in self.containers(store=store):
            self.api("DELETE", "/containers/%s?force=1&v=1" % c["Id"])

    def _raw(self, path):
        r = subprocess.run(["curl", "-s", "--unix-socket", self.socket, "http://d/v1.41" + path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return r.stdout

    def exec_cat(self, container, path):
        """A file of a container, read through the archive API (a tar of one file)."""
        data = self._raw("/containers/%s/archive?path=%s" % (container, _quote(path)))
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            member = t.next()
            return t.extractfile(member).read().decode()

    def logs(self, container):
        """The container's standard output and error (the multiplexed stream decoded)."""
        data = self._raw("/containers/%s/logs?stdout=1&stderr=1" % container)
        out, i = [], 0
        while i + 8 <= len(data):
            n = int.from_bytes(data[i + 4:i + 8], "big")
            out.append(data[i + 8:i + 8 + n])
            i += 8 + n
        return b"".join(out).decode(errors="replace")

    def put_file(self, container, folder, name, data, mode=0o644):
        """Writes one file into a container through the archive API (as a renewal does)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
        path = os.path.join(self.dir, "put.tar")
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        r = _run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", "--unix-socket", self.socket,
                  "-H", "Content-Type: application/x-tar", "--data-binary", "@" + path,
                  "http://d/v1.41/containers/%s/archive?path=%s" % (container, _quote(folder))])
        assert r.stdout == "200", (r.stdout, r.stderr)

    def relay(self, binary, images, state_dir=None, project=None, extra_options=None, **env):
        opts = {"endpoint": self.endpoint, "images": images, "reaperIntervalMs": 500}
        if self.runtime:
            opts["runtime"] = self.runtime
        opts.update(extra_options or {})
        e = {"MCP_RELAY_BACKEND": "docker", "MCP_RELAY_DOCKER_OPTIONS": json.dumps(opts)}
        e.update({k: (None if v is None else str(v)) for k, v in env.items()})
        r = Relay(binary, env=e, state_dir=state_dir, project=project)
        self.stores = getattr(self, "stores", []) + [store_of(r)]
        return r


def doctor(binary, options, **env):
    """`mcp-relay doctor` with machine-docker and `options` (and `env`, such as
    MCP_RELAY_GUEST_NETWORK): (exit code, standard output)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_RELAY_", "MCP_VM_RELAY_"))}
    e.pop("VM_ENVIRONMENT_FILE", None)
    e.update({"MCP_RELAY_BACKEND": "docker", "MCP_RELAY_DOCKER_OPTIONS": json.dumps(options),
              "MCP_RELAY_STATE_DIR": tempfile.mkdtemp(prefix="docker-doctor-")})
    e.update(env)
    p = subprocess.run([binary, "doctor"], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120, cwd=tempfile.gettempdir())
    return p.returncode, p.stdout


def doctor_line(out, check):
    """The lines of doctor's output for `check`."""
    found = [ln for ln in out.splitlines() if ln[5:].startswith(check + " ")]
    assert found, (check, out)
    return found


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _quote(text):
    from urllib.parse import quote
    return quote(text, safe="")


def plugin_missing(binary):
    if not os.path.exists(plugin_so(binary, "machine-docker")):
        return "machine-docker.so is not built (%s)" % plugin_so(binary, "machine-docker")
    return None


def acquire(r, image, task="docker", timeout=300, **extra):
    args = {"task": task, "image": image, "extractions": []}
    args.update(extra)
    res = r.call_tool("relay_acquire", args, timeout=timeout)
    assert res["isError"] is False, text_of(res)
    return structured(res)


def diag(r, guest, code, timeout_ms=60000):
    args = {"guest": guest, "language": "shell", "inline": True, "code": code, "diagnostic": True,
            "timeoutMs": timeout_ms}
    return full(r.call_tool("relay_script", args, timeout=timeout_ms / 1000 + 60))


def sh(r, guest, code):
    s = diag(r, guest, code)
    assert s["outcome"].get("exitStatus", {}).get("code") == 0, s
    return s["output"]


def store_of(r):
    """The machine-docker state folder of a relay (the store label of its containers)."""
    return os.path.join(r.state_dir, "plugins", "machine-docker")
