#!/usr/bin/env python3
"""machine-docker under MCP_RELAY_GUEST_NETWORK=allow on a real Podman (docker_support.Engine;
issue 23, docs/egress.md): the container keeps NetworkMode none, the relay's egress proxy
listens in its loopback. The relay runs inside the closed world of egress_support (nothing
leaves the machine); the guest reaches the world's allowed name through the proxy only."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, structured, text_of  # noqa: E402
import egress_support  # noqa: E402

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


def test_allow_on_podman(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng, egress_support.World("egress-docker") as world:
        img = eng.image("full")
        wrapper = world.relay_command(binary)
        with eng.relay(wrapper, images={"full": img}, MCP_RELAY_GUEST_NETWORK="allow",
                       MCP_RELAY_EGRESS_ALLOW="allowed.test") as r:
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
            doc = json.load(open(os.path.join(structured(fin)["evidencePath"], "network.json")))
            assert doc["totals"]["allowed"] == 1 and doc["totals"]["refused"] == 1, doc["totals"]
            assert doc["policy"] == {"guestNetwork": "allow", "rules": ["allowed.test"]}, doc


if __name__ == "__main__":
    run_tests(globals())
