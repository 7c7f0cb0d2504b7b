"""egress_support: a closed world for the egress tests (docs/egress.md, issue 23).

Nothing leaves the machine: the relay runs inside a network namespace the test creates
("egr-r-<pid>"), whose only neighbour is another namespace of the test ("egr-w-<pid>",
through a veth pair) holding a DNS server (dnsmasq) and HTTP/HTTPS servers on
documentation-range addresses:

    relay ns  198.51.100.1/24 --veth-- 198.51.100.2/24  world ns (dnsmasq on :53)
              routes 192.0.2.0/24, 203.0.113.0/24 via .2    192.0.2.10 (http :80 :8080, https :443)
                                                            203.0.113.9 (http :80, :22)
    names (dnsmasq): allowed.test, api.sub.test, other.test -> 192.0.2.10;
                     rebind.test -> 127.0.0.1; private.test -> 10.1.2.3; doh.test -> 192.0.2.10

The relay's /etc/resolv.conf is the world's dnsmasq (a bind mount in a mount namespace of
its own: `unshare -m`). Needs root, ip, dnsmasq, openssl, curl.
"""

import os
import shutil
import subprocess
import tempfile
import time

from relay_client import Relay, skip

WORLD_SERVER = r'''
import http.server, socketserver, ssl, sys, threading, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/big/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
            return
        if self.path.startswith("/slow"):
            self.send_response(200)
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            for _ in range(64 * 16):
                self.wfile.write(b"y" * 65536)
                self.wfile.flush()
                __import__("time").sleep(0.05)
            return
        body = ("hello from %s:%d host=%s\n" % (self.server.server_address[0], self.server.server_address[1],
                                             self.headers.get("Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
servers = []
for spec in sys.argv[2:]:
    addr, port, tls = spec.split(":")
    s = S((addr, int(port)), H)
    if tls == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(sys.argv[1], "cert.pem"), os.path.join(sys.argv[1], "key.pem"))
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    servers.append(s)
print("ready", flush=True)
threading.Event().wait()
'''


def run(*argv, check=True):
    r = subprocess.run(list(argv), check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r


class World:
    """The namespaces, dnsmasq and the servers; World.relay() starts mcp-relay inside."""

    def __init__(self, tag="egress"):
        if os.geteuid() != 0:
            skip("the egress world needs root (network namespaces, veth)")
        for tool in ("ip", "dnsmasq", "openssl", "curl", "unshare", "nsenter"):
            if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
                skip("%s is missing (scripts/deps.sh test installs dnsmasq-base)" % tool)
        self.root = tempfile.mkdtemp(prefix="relay-%s-" % tag)
        os.chmod(self.root, 0o755)
        self.procs = []
        # A world that fails to come up (a server that did not start on a loaded machine) is
        # built again, up to four times.
        for attempt in range(4):
            try:
                self._namespaces()
                self._dns()
                self._servers()
                return
            except Exception:
                self._stop()
                if attempt == 3:
                    shutil.rmtree(self.root, ignore_errors=True)
                    raise
                time.sleep(0.5)

    def _namespaces(self):
        # Each namespace is held by a process of the test (`unshare --net sleep`) and entered by
        # its pid (`nsenter`), not by a name under /run/netns: other jobs on this machine run
        # `ip netns add` at the same time, and a racing one can stack a new /run/netns mount
        # over the names made before it ("setting the network namespace ... failed").
        self.holders = {}
        for role in ("r", "w"):
            p = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)
            deadline = time.monotonic() + 5
            while os.readlink("/proc/%d/ns/net" % p.pid) == os.readlink("/proc/self/ns/net"):
                if time.monotonic() > deadline:
                    raise RuntimeError("unshare --net did not make a namespace")
                time.sleep(0.01)
            self.holders[role] = p.pid
        self.ns_r, self.ns_w = str(self.holders["r"]), str(self.holders["w"])
        for ns in (self.ns_r, self.ns_w):
            self.ip(ns, "link", "set", "lo", "up")
        veth_r, veth_w = "egr%dr" % (os.getpid() % 100000), "egr%dw" % (os.getpid() % 100000)
        run("ip", "link", "add", veth_r, "netns", self.ns_r, "type", "veth", "peer", "name", veth_w, "netns",
            self.ns_w)
        self.ip(self.ns_r, "addr", "add", "198.51.100.1/24", "dev", veth_r)
        self.ip(self.ns_w, "addr", "add", "198.51.100.2/24", "dev", veth_w)
        for ns, dev in ((self.ns_r, veth_r), (self.ns_w, veth_w)):
            self.ip(ns, "link", "set", dev, "up")
        for addr in ("192.0.2.10/32", "203.0.113.9/32"):
            self.ip(self.ns_w, "addr", "add", addr, "dev", "lo")
        for net in ("192.0.2.0/24", "203.0.113.0/24"):
            self.ip(self.ns_r, "route", "add", net, "via", "198.51.100.2")
        self.resolv = os.path.join(self.root, "resolv.conf")
        with open(self.resolv, "w") as f:
            f.write("nameserver 198.51.100.2\noptions timeout:1 attempts:2\n")

    def ip(self, ns, *argv):
        return run("nsenter", "-t", ns, "-n", "ip", *argv)

    def enter(self, ns):
        return ["nsenter", "-t", ns, "-n"]

    def _dns(self):
        pid_file = os.path.join(self.root, "dnsmasq.pid")
        argv = self.enter(self.ns_w) + ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
                "--listen-address=198.51.100.2", "--bind-interfaces", "--port=53", "--pid-file=" + pid_file,
                "--user=root", "--log-facility=" + os.path.join(self.root, "dnsmasq.log")]
        for name, addr in (("allowed.test", "192.0.2.10"), ("sub.test", "192.0.2.10"), ("other.test", "192.0.2.10"),
                           ("rebind.test", "127.0.0.1"), ("private.test", "10.1.2.3"), ("doh.test", "192.0.2.10")):
            argv.append("--address=/%s/%s" % (name, addr))
        self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _servers(self):
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=allowed.test",
            "-addext", "subjectAltName=DNS:allowed.test,DNS:other.test", "-keyout",
            os.path.join(self.root, "key.pem"), "-out", os.path.join(self.root, "cert.pem"))
        script = os.path.join(self.root, "world_server.py")
        with open(script, "w") as f:
            f.write(WORLD_SERVER)
        specs = ["192.0.2.10:80:plain", "192.0.2.10:8080:plain", "192.0.2.10:443:tls", "203.0.113.9:80:plain",
                 "203.0.113.9:22:plain"]
        err_path = os.path.join(self.root, "world_server.err")
        with open(err_path, "w") as err:
            p = subprocess.Popen(self.enter(self.ns_w) + ["/usr/bin/python3", script, self.root] + specs,
                                 stdout=subprocess.PIPE, stderr=err, text=True)
        self.procs.append(p)
        self.server_pid = p.pid  # nsenter execs the server: the same process
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("the world's HTTP servers did not start: %s" % open(err_path).read()[-2000:])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = self.in_relay_ns("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/",
                                 check=False)
            if r.stdout.strip() == "200":
                return
            time.sleep(0.2)
        raise RuntimeError("the world is not reachable from the relay's namespace: %s" % r.stderr)

    def in_relay_ns(self, *argv, check=True):
        """A command in the relay's namespace, with the world's resolver."""
        return run(*self.enter(self.ns_r), "unshare", "-m", "sh", "-c",
                   'mount --bind "$0" /etc/resolv.conf && exec "$@"', self.resolv, *argv, check=check)

    def relay_ns_prefix(self):
        """A command prefix (root) that execs the rest in the relay's namespace with the world's
        resolver, for a test that runs itself there as an ordinary user."""
        return self.enter(self.ns_r) + ["unshare", "-m", "sh", "-c",
                                        'mount --bind "$0" /etc/resolv.conf && exec "$@"', self.resolv]

    def relay_command(self, binary):
        """A wrapper that starts `binary` inside the relay's namespace."""
        wrapper = os.path.join(self.root, "mcp-relay-in-ns")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec nsenter -t %s -n unshare -m sh -c \'mount --bind %s /etc/resolv.conf && '
                    'exec "$0" "$@"\' %s "$@"\n' % (self.ns_r, self.resolv, binary))
        os.chmod(wrapper, 0o755)
        return wrapper

    def _stop(self):
        for p in self.procs:
            p.terminate()
            try:
                p.wait(timeout=5)
            except Exception:
                p.kill()
        self.procs = []  # the namespaces (and the veth pair) go with their holders

    def close(self):
        self._stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
