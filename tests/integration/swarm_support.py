"""swarm_support: a Swarm of several real dockerd, each in a network namespace of its own, for
test_docker_swarm_nodes.py (issue 28). Nothing leaves the machine and nothing of this host's
network is touched:

- a "hub" namespace holds a bridge; each node's namespace gets a veth pair into it and an
  address in 10.231.28.0/24, which exists only inside those namespaces;
- each dockerd runs `ip netns exec <node ns> unshare --mount --propagation private dockerd ...`
  with its own socket, data root, exec root and pidfile under a temporary folder, and
  `--iptables=false` (so no firewall rule is written anywhere, not even in its namespace);
- node 1 runs `docker swarm init` on its address (overlay pool 10.232.0.0/16), the others join
  over those addresses as managers or workers.

    with Swarm(managers=3, workers=1) as sw:
        sw.nodes[0].endpoint      # "unix:///tmp/relay-swarm-.../n1/docker.sock"
        sw.load_image(tag)        # one `docker import` on node 1, `docker save | docker load` to the rest
        sw.stop(node) / sw.drain(node)

The docker CLI talks to each node's unix socket from this host's namespace; it is used only to
set up and to look — never in the relay's data path.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from relay_client import skip
from docker_support import CACHE, _build_tree, _image_hash, _quote, _wait_socket, dockerd_missing

SUBNET = "10.231.28."
POOL = "10.232.0.0/16"


def _run(argv, check=False, timeout=120, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s failed: %s %s" % (" ".join(argv), r.stdout, r.stderr))
    return r


class Node:
    def __init__(self, swarm, index, role):
        self.swarm, self.index, self.role = swarm, index, role
        self.name = "%s-n%d" % (swarm.tag, index)  # the netns, and the node's hostname
        self.addr = SUBNET + str(index)
        self.dir = os.path.join(swarm.dir, "n%d" % index)
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "docker.sock")
        self.endpoint = "unix://" + self.socket
        self.cli = ["docker", "-H", self.endpoint]
        self.proc = None
        self.log = None
        self.id = None

    def start(self):
        self.log = open(os.path.join(self.dir, "dockerd.log"), "ab")
        # nsenter, not `ip netns exec`: that mounts a fresh /sys and hides this host's cgroup
        # mounts (v1 here), which dockerd needs. In the node's own private mount namespace a sysfs
        # of its network namespace goes on /sys, with the cgroup tree bound back beneath it.
        cg = os.path.join(self.dir, "cgroup")
        os.makedirs(cg, exist_ok=True)
        script = ('hostname "$0" && mount --rbind /sys/fs/cgroup "$1" && mount -t sysfs sysfs /sys && '
                  'mount --rbind "$1" /sys/fs/cgroup && shift && exec "$@"')
        hosts = ["--host", self.endpoint]
        common = self.swarm.common_socket_dir
        if common:
            # The engine also answers at one path that is the same on every node, as
            # /var/run/docker.sock is on real hosts (options.discovery has one remoteSocket):
            # a tmpfs of the node's own mount namespace.
            script = 'mount -t tmpfs -o mode=0755 tmpfs "%s" && %s' % (common, script)
            hosts += ["--host", "unix://%s/docker.sock" % common]
        argv = ["nsenter", "--net=" + self.swarm.ns_path(self.name), "unshare", "--mount", "--uts", "--propagation",
                "private", "sh", "-c", script, self.name, cg,
                "dockerd"] + hosts + ["--data-root", os.path.join(self.dir, "root"),
                "--exec-root", os.path.join(self.dir, "exec"), "--pidfile", os.path.join(self.dir, "pid"),
                "--iptables=false", "--ip6tables=false", "--bridge=none"]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        if not _wait_socket(self.socket, self.proc, seconds=60):
            raise AssertionError("dockerd of %s did not start (%s)" % (self.name, self.tail()))

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None

    def tail(self):
        try:
            with open(os.path.join(self.dir, "dockerd.log"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def docker(self, *args, check=True, timeout=300, **kw):
        return _run(self.cli + list(args), check=check, timeout=timeout, **kw)

    def api(self, method, path, body=None):
        argv = ["curl", "-s", "--unix-socket", self.socket, "-w", "\n%{http_code}", "--max-time", "30"]
        argv += ["-o", "/dev/null", "-I"] if method == "HEAD" else ["-X", method]
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
        filt = {"label": ["io.mcp-relay.%s=%s" % (k.replace("_", "-"), v) for k, v in labels.items()]}
        code, data = self.api("GET", "/containers/json?all=1&filters=" + _quote(json.dumps(filt)))
        assert code == 200, (self.name, code, data)
        return data


class Swarm:
    made = 0

    def __init__(self, managers=3, workers=1, common_socket=False):
        why = dockerd_missing()
        if why:
            skip(why)
        if not shutil.which("ip"):
            skip("ip (iproute2) is not installed")
        Swarm.made += 1  # names of this instance: netns, hostnames (never reused within a run)
        self.tag = "rsw%d-%d" % (os.getpid() % 100000, Swarm.made)
        self.dir = tempfile.mkdtemp(prefix="relay-swarm-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.hub = self.tag + "-hub"
        # common_socket: each engine also at <this>/docker.sock inside its node (test_docker_swarm_discovery)
        self.common_socket_dir = "/run/relay-swarm2-%s" % self.tag if common_socket else None
        if self.common_socket_dir:
            os.makedirs(self.common_socket_dir, exist_ok=True)
        self.nodes = []
        self.namespaces = []
        self.ns_fd = {}
        try:
            self._network(managers + workers)
            for i in range(managers + workers):
                self.nodes.append(Node(self, i + 1, "manager" if i < managers else "worker"))
            for n in self.nodes:
                n.start()
            self._join()
        except BaseException:
            self.close()
            raise

    # -- the network: a bridge in a hub namespace, a veth into each node's namespace ---------
    # Each namespace is held by a descriptor from the moment it is made, and every command after
    # `ip netns add` enters it through that descriptor, never through /run/netns/<name>: that
    # bind mount is shared, and was seen to vanish under a running test on this shared machine
    # (an unmount elsewhere propagating to it). The descriptor stays the namespace regardless.
    def _ns(self, name):
        _run(["ip", "netns", "add", name], check=True)
        self.namespaces.append(name)
        self.ns_fd[name] = os.open("/run/netns/" + name, os.O_RDONLY)
        self.ns_in(name, "ip", "link", "set", "lo", "up")

    def ns_path(self, name):
        return "/proc/%d/fd/%d" % (os.getpid(), self.ns_fd[name])

    def ns_in(self, name, *argv):
        return _run(["nsenter", "--net=" + self.ns_path(name)] + list(argv), check=True)

    def _network(self, count):
        r = _run(["ip", "netns", "add", self.hub])
        if r.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            skip("cannot make a network namespace here: %s" % r.stderr.strip())
        self.namespaces.append(self.hub)
        self.ns_fd[self.hub] = os.open("/run/netns/" + self.hub, os.O_RDONLY)
        self.ns_in(self.hub, "ip", "link", "add", "br0", "type", "bridge")
        self.ns_in(self.hub, "ip", "link", "set", "br0", "up")
        for i in range(1, count + 1):
            ns = "%s-n%d" % (self.tag, i)
            self._ns(ns)
            # Made in the hub, one end moved into the node's namespace: nothing in this host's.
            self.ns_in(self.hub, "ip", "link", "add", "h%d" % i, "type", "veth", "peer", "name", "p%d" % i)
            self.ns_in(self.hub, "ip", "link", "set", "p%d" % i, "netns", self.ns_path(ns))
            self.ns_in(self.hub, "ip", "link", "set", "h%d" % i, "master", "br0", "up")
            self.ns_in(ns, "ip", "link", "set", "p%d" % i, "name", "eth0")
            self.ns_in(ns, "ip", "addr", "add", "%s%d/24" % (SUBNET, i), "dev", "eth0")
            self.ns_in(ns, "ip", "link", "set", "eth0", "up")

    def _join(self):
        first = self.nodes[0]
        r = first.docker("swarm", "init", "--advertise-addr", first.addr, "--listen-addr", first.addr + ":2377",
                         "--default-addr-pool", POOL, check=False)
        if r.returncode != 0:
            raise AssertionError("swarm init: %s" % r.stderr)
        tokens = {role: first.docker("swarm", "join-token", "-q", role).stdout.strip()
                  for role in ("manager", "worker")}
        for n in self.nodes[1:]:
            n.docker("swarm", "join", "--token", tokens[n.role], "--advertise-addr", n.addr,
                     "--listen-addr", n.addr + ":2377", first.addr + ":2377")
        self.wait("every node ready", lambda: len(self.ready_nodes()) == len(self.nodes), timeout=120)
        for n in self.nodes:
            n.id = n.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()

    def manager(self):
        """A node that answers as a manager (the first still running)."""
        for n in self.nodes:
            if n.role == "manager" and n.proc and n.proc.poll() is None:
                return n
        raise AssertionError("no manager runs")

    def ready_nodes(self):
        code, nodes = self.manager().api("GET", "/nodes")
        if code != 200:
            return []
        return [x for x in nodes if x["Status"]["State"] == "ready"]

    def node_of(self, node_id):
        return next(n for n in self.nodes if n.id == node_id)

    def tasks(self, service):
        code, data = self.manager().api("GET", "/tasks?filters=" + _quote(json.dumps({"service": [service]})))
        assert code == 200, (code, data)
        return data

    def drain(self, node):
        self.manager().docker("node", "update", "--availability", "drain", node.id)

    @staticmethod
    def wait(what, pred, timeout=60, step=0.5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = pred()
            if got:
                return got
            time.sleep(step)
        raise AssertionError("timed out waiting for " + what)

    # -- images ------------------------------------------------------------------------------
    def load_image(self, kind):
        """The test image `kind` on every node with one image id: imported once on node 1 from the
        cached tarball (docker_support's, under /var/cache/mcp-relay-ci), then `docker save |
        docker load` into each other node."""
        tag = "localhost/mcp-relay-test-%s:%s" % (kind, _image_hash(kind))
        first = self.nodes[0]
        if first.docker("image", "inspect", tag, check=False).returncode != 0:
            os.makedirs(CACHE, exist_ok=True)
            base = os.path.join(CACHE, "%s-%s" % (kind, _image_hash(kind)))
            tar = base + ".tar"
            if not os.path.exists(tar):
                root = base + ".root"
                shutil.rmtree(root, ignore_errors=True)
                _build_tree(kind, root)
                subprocess.run(["tar", "-C", root, "--numeric-owner", "-cf", tar + ".tmp", "."], check=True)
                os.replace(tar + ".tmp", tar)
                shutil.rmtree(root, ignore_errors=True)
            first.docker("import", tar, tag)
        saved = os.path.join(self.dir, kind + ".image.tar")
        first.docker("save", "-o", saved, tag)
        for n in self.nodes[1:]:
            n.docker("load", "-i", saved)
        os.unlink(saved)
        return tag

    # -- the end -----------------------------------------------------------------------------
    def close(self):
        t0 = time.monotonic()
        for n in reversed(self.nodes):
            n.stop()
        print("  swarm stopped in %.1f s" % (time.monotonic() - t0), flush=True)
        for ns in reversed(self.namespaces):
            _run(["ip", "netns", "del", ns])
        if self.common_socket_dir:
            shutil.rmtree(self.common_socket_dir, ignore_errors=True)
        for fd in self.ns_fd.values():
            os.close(fd)
        keep = os.environ.get("RELAY_DOCKER_KEEP_LOG")
        if keep:
            os.makedirs(keep, exist_ok=True)
            for n in self.nodes:
                src = os.path.join(n.dir, "dockerd.log")
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(keep, "swarm-%s.log" % n.name))
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
