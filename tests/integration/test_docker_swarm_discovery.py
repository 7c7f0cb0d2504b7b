#!/usr/bin/env python3
"""machine-docker's options.discovery on a real Swarm (issue 28): four dockerd started by the test
(swarm_support.py), each in a network namespace of its own — a manager and three workers — and a
real sshd in the network and mount namespaces of two workers, as on real hosts. The relay runs in
the manager's network namespace (the addresses exist only there) with the manager's engine as its
endpoint and no options.nodes at all: every worker is reached at the address the manager reports
for it (/nodes/{id} Status.Addr) over ssh, host keys checked strictly against the known_hosts file.

- a worker with an sshd whose key is in known_hosts: a guest placed there runs on that worker's
  engine through the ssh forwarder (the test reads the file it wrote through that engine), its
  node reads engine "ssh" from "discovery" and reachable in relay_acquisition_capabilities, and
  release is verified;
- a worker with no sshd (it cannot be reached): a guest placed there is refused at acquire naming
  the node, options.discovery and ssh's own "Connection refused"; nothing is left;
- a worker whose sshd's host key is not the one in known_hosts: refused naming the node and ssh's
  "Host key verification failed"; nothing is left, and known_hosts is not rewritten.
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, skip  # noqa: E402
from docker_support import acquire, plugin_missing, sh, structured, text_of  # noqa: E402
from swarm_support import Swarm  # noqa: E402

CLONE_NEWNET = 0x40000000


def keygen(path, comment):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)
    with open(path + ".pub") as f:
        return " ".join(f.read().split()[:2])


class Sshd:
    """A real sshd in a node's own network and mount namespaces (those of its dockerd), on port 22 of
    the node's address: it forwards to the node's engine at the common socket path."""

    def __init__(self, node, root, user_pub):
        self.node = node
        self.dir = os.path.join(root, "sshd-" + node.name)
        os.makedirs(self.dir, mode=0o700)
        self.host_key = os.path.join(self.dir, "host_key")
        self.pub = keygen(self.host_key, "relay-swarm2-" + node.name)
        with open(os.path.join(self.dir, "authorized_keys"), "w") as f:
            f.write(user_pub + "\n")
        config = os.path.join(self.dir, "sshd_config")
        with open(config, "w") as f:
            f.write("Port 22\nListenAddress %s\nHostKey %s\nUsePAM no\nPermitRootLogin prohibit-password\n"
                    "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "AuthorizedKeysFile %s/authorized_keys\nStrictModes no\nPidFile %s/sshd.pid\n"
                    "AllowStreamLocalForwarding yes\nMaxStartups 64\n" % (node.addr, self.host_key, self.dir, self.dir))
        os.makedirs("/run/sshd", exist_ok=True)
        self.log = open(os.path.join(self.dir, "sshd.log"), "wb")
        self.proc = subprocess.Popen(["nsenter", "-t", str(node.proc.pid), "-n", "-m", "/usr/sbin/sshd", "-D", "-e",
                                      "-f", config], stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        node.swarm.wait("sshd of %s" % node.name, self.listening, timeout=15, step=0.1)

    def listening(self):
        r = subprocess.run(["nsenter", "--net=" + self.node.swarm.ns_path(self.node.name), "ss", "-Hltn",
                            "sport = :22"], stdout=subprocess.PIPE, text=True)
        return self.node.addr + ":22" in r.stdout

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.log.close()


def relay_in(binary, sw, images, ssh_opts, node):
    """The relay in the manager's network namespace, every worker by discovery, guests placed on `node`."""
    manager = sw.nodes[0]
    opts = {"endpoint": manager.endpoint, "images": images, "reaperIntervalMs": 1000,
            "discovery": {"ssh": ssh_opts}, "placement": {"constraints": ["node.hostname==" + node.name]}}
    ns = sw.ns_path(manager.name)

    def enter():
        fd = os.open(ns, os.O_RDONLY)
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            os._exit(120)
        os.close(fd)

    env = {"MCP_RELAY_BACKEND": "docker", "MCP_RELAY_DOCKER_OPTIONS": json.dumps(opts)}
    return Relay(binary, env=env, preexec_fn=enter)


def nodes_seen(r):
    caps = r.call_tool("relay_acquisition_capabilities", {}, timeout=120)
    assert caps["isError"] is False, text_of(caps)
    placement = structured(caps)["options"]["placement"]
    assert placement["scheduler"] == "swarm", placement
    return {n["name"]: n for n in placement["nodes"]}


def assert_refused(r, sw, task, *words):
    res = r.call_tool("relay_acquire", {"task": task, "image": "minimal", "extractions": []}, timeout=300)
    text = text_of(res)
    assert res["isError"] and all(w in text for w in words), text
    assert sw.manager().api("GET", "/services")[1] == [], "the refused guest's service is left"
    return text


def test_discovery_over_ssh(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    if os.geteuid() != 0:
        skip("the sshd of each node needs root")
    if not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        skip("sshd, ssh or ssh-keygen is missing (openssh-server, openssh-client)")
    root = tempfile.mkdtemp(prefix="rsw2-ssh-")
    sshds = []
    try:
        with Swarm(managers=1, workers=3, common_socket=True) as sw:
            images = {"minimal": sw.load_image("minimal")}
            good, dead, forged = sw.nodes[1], sw.nodes[2], sw.nodes[3]
            user_key = os.path.join(root, "user_key")
            user_pub = keygen(user_key, "relay-swarm2-user")
            for n in (good, forged):
                sshds.append(Sshd(n, root, user_pub))
            known = os.path.join(root, "known_hosts")
            other = keygen(os.path.join(root, "other_key"), "not-the-host")
            with open(known, "w") as f:
                f.write("%s %s\n%s %s\n%s %s\n" % (good.addr, sshds[0].pub, dead.addr, other, forged.addr, other))
            with open(known) as f:
                known_before = f.read()
            ssh_opts = {"user": "root", "port": 22, "identityFile": user_key, "knownHostsFile": known,
                        "remoteSocket": sw.common_socket_dir + "/docker.sock"}

            # Reached by discovery: a real run on the worker's engine through its sshd.
            with relay_in(binary, sw, images, ssh_opts, good) as r:
                r.initialize()
                a = acquire(r, "minimal", task="found")
                task = sw.tasks(a["vm"])[0]
                assert sw.node_of(task["NodeID"]) is good, task["NodeID"]
                out = sh(r, a["guest"], "echo %s > /tmp/where; cat /tmp/where; id -u" % a["guest"])
                assert out.split() == [a["guest"], "61000"], out
                cid = task["Status"]["ContainerStatus"]["ContainerID"]
                assert good.api("HEAD", "/containers/%s/archive?path=/tmp/where" % cid)[0] == 200
                assert "ssh://root@%s:22" % good.addr in open(os.path.join(r.state_dir, "plugins", "machine-docker",
                                                                          "leases", a["vm"] + ".json")).read()
                seen = nodes_seen(r)
                assert seen[good.name]["engine"] == "ssh" and seen[good.name]["engine_source"] == "discovery", seen
                assert seen[good.name]["reachable"] is True and seen[good.name]["guests"] == 1, seen
                assert seen[sw.nodes[0].name]["engine"] == "unix" and seen[sw.nodes[0].name]["reachable"] is True
                assert seen[dead.name]["reachable"] is False and seen[forged.name]["reachable"] is False, seen
                probe = structured(r.call_tool("relay_probe", {"scope": "host"}, timeout=120))
                why = {n["hostname"]: n.get("unreachableReason") for n in probe["backend"]["capacity"]["swarmNodes"]}
                assert "Connection refused" in why[dead.name], why
                assert "Host key verification failed" in why[forged.name], why
                rel = r.call_tool("relay_release", {"guest": a["guest"]}, timeout=300)
                assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)

            # A node that cannot be reached (no sshd): refused with the node, the option and ssh's reason.
            with relay_in(binary, sw, images, ssh_opts, dead) as r:
                r.initialize()
                text = assert_refused(r, sw, "dead", dead.name, "options.discovery", "Connection refused")
                print("  unreachable: %s" % text.split("\n")[0][:400], flush=True)

            # A wrong host key: refused with ssh's own words, and known_hosts is not rewritten.
            with relay_in(binary, sw, images, ssh_opts, forged) as r:
                r.initialize()
                text = assert_refused(r, sw, "forged", forged.name, "options.discovery",
                                      "Host key verification failed", known)
                print("  wrong host key: %s" % text.split("\n")[0][:400], flush=True)
            with open(known) as f:
                assert f.read() == known_before, "known_hosts was rewritten"
            for n in sw.nodes:
                assert n.containers(plugin="machine-docker") == [], n.name
    finally:
        for s in sshds:
            s.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
