#!/usr/bin/env python3
"""machine-docker under MCP_RELAY_GUEST_NETWORK=allow on a real Podman (docker_support.Engine;
issue 23, docs/egress.md): the container keeps NetworkMode none, the relay's egress proxy
listens in its loopback. The relay runs inside the closed world of egress_support (nothing
leaves the machine); the guest reaches the world's allowed name through the proxy only. The same
on a rootless Podman of the ordinary user relayci, with a relay run as relayci."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import NotSelected, run_tests, skip  # noqa: E402
import docker_support  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, structured, text_of  # noqa: E402
import egress_support  # noqa: E402
from test_docker_rootless import ENV_DIR, rerun_as_user  # noqa: E402

WORLD = "RELAY_TEST_EGRESS_WORLD"

PROBE = r'''
import errno, json, os, socket
out = {"env": sorted(k for k in os.environ if k.lower().endswith("_proxy"))}
def via_proxy(host):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)).encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    return data.decode(errors="replace")
out["allowed"] = via_proxy("allowed.test")
out["other"] = via_proxy("other.test")
try:
    out["resolve"] = socket.gethostbyname("allowed.test")
except OSError as e:
    out["resolve"] = "error " + str(e)
try:
    socket.gethostbyname("other.test")
    out["resolve_other"] = "resolved"
except OSError as e:
    out["resolve_other"] = "error"
try:
    socket.create_connection(("192.0.2.10", 80), timeout=20)
    out["direct"] = "connected"
except OSError as e:
    out["direct"] = errno.errorcode.get(e.errno, str(e.errno))
out["resolv_conf"] = open("/etc/resolv.conf").read()
print(json.dumps(out))
'''


def check_allow(r):
    """One machine-docker guest under allow (the rule allowed.test) through relay `r`."""
    r.initialize()
    g = acquire(r, "full", task="egress")
    name = g["guest"]
    res = r.call_tool("relay_stage", {"guest": name}, timeout=300)
    assert res["isError"] is False, text_of(res)
    res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True,
                                       "code": "python3.11 - <<'EOF'\n%sEOF\n" % PROBE}, timeout=300)
    assert res["isError"] is False, text_of(res)
    s = structured(res)
    p = json.loads(s["stdout"])
    assert "HTTP_PROXY" in p["env"] and "https_proxy" in p["env"], p
    assert "hello from 192.0.2.10:80 host=allowed.test" in p["allowed"], p
    assert "403 Forbidden" in p["other"] and "egress refused other.test:80: no rule names it" in p["other"], p
    assert p["resolve"] == "192.0.2.10" and p["resolve_other"] == "error", p
    assert p["direct"] == "ENETUNREACH", p
    assert "nameserver 127.0.0.1" in p["resolv_conf"], p
    assert s["network"]["allowed"] == 1 and s["network"]["refused"] == 1, s["network"]
    assert "1 connection refused by the egress policy (other.test:80)" in text_of(res).split("\n")[0]
    fin = r.call_tool("relay_finish", {"guest": name}, timeout=300)
    assert fin["isError"] is False, text_of(fin)
    ev = structured(fin)["evidencePath"]
    doc = json.load(open(os.path.join(ev, "network.json")))
    assert doc["totals"]["allowed"] == 1 and doc["totals"]["refused"] == 1, doc["totals"]
    assert doc["policy"] == {"guestNetwork": "allow", "rules": ["allowed.test"]}, doc
    manifest = json.load(open(os.path.join(ev, "manifest.json")))
    assert [e for e in manifest["records"] if e["path"] == "network.json"], manifest["records"]


def test_allow_on_podman(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    if os.geteuid() != 0:
        raise NotSelected("root's Podman: run by root (test_allow_on_rootless_podman covers an ordinary user)")
    with Engine() as eng, egress_support.World("egress-docker") as world:
        img = eng.image("full")
        with eng.relay(world.relay_command(binary), images={"full": img}, MCP_RELAY_GUEST_NETWORK="allow",
                       MCP_RELAY_EGRESS_ALLOW="allowed.test") as r:
            check_allow(r)


def test_allow_on_rootless_podman(binary):
    """Run by root: builds the world and runs this test again as relayci in the relay's
    namespace, where relayci starts its own rootless Podman service and the relay. The
    container's namespaces belong to that Podman's user namespace; the plugin joins it (its
    owner, relayci, holds every capability in it) to make the proxy's sockets."""
    why = plugin_missing(binary)
    if why:
        skip(why)
    if os.geteuid() == 0:
        with egress_support.World("egress-docker-rl") as world:
            cache = docker_support.CACHE if os.access(docker_support.CACHE, os.R_OK) else None
            rerun_as_user(binary, script=__file__, prefix=world.relay_ns_prefix(), only="rootless",
                          env_extra=dict({WORLD: world.root}, **({"RELAY_DOCKER_CACHE": cache} if cache else {})))
        return
    if not os.environ.get(WORLD):
        skip("run this file as root: it builds the egress world, then runs this test as relayci in it")
    with Engine(rootless_dir=os.environ.get(ENV_DIR) or tempfile.mkdtemp(prefix="rl-egress-")) as eng:
        code, info = eng.api("GET", "/info")
        assert code == 200 and info.get("Rootless") is True, info
        img = eng.image("full")
        with eng.relay(binary, images={"full": img}, MCP_RELAY_GUEST_NETWORK="allow",
                       MCP_RELAY_EGRESS_ALLOW="allowed.test") as r:
            check_allow(r)


if __name__ == "__main__":
    run_tests(globals())
