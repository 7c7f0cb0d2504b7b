#!/usr/bin/env python3
"""Egress you can prove on machine-local without root (issue 23, docs/egress.md).

Run by root, the file builds the closed world of egress_support.World (dnsmasq and HTTP/HTTPS
servers on documentation-range addresses, nothing leaves the machine) and runs itself again as
the ordinary user relayci inside the relay's namespace (rootless_support.as_ordinary_user with
a prefix); that run starts the real relay as relayci with image `local`. A relay that is not
root cannot enter its guest's network namespace (it belongs to the guest's user namespace), so
the guest's init makes the proxy's sockets there and passes them over the control socket:

  - the guest (allow) reaches an allowed name over HTTP, CONNECT and SOCKS5; an unlisted name,
    a name resolving to loopback and an IP literal are refused at once with the reason; what
    ignores the proxy (TCP, UDP, IPv6) fails with ENETUNREACH; the resolver answers only
    allowed names; the step's lead counts the refusals;
  - the proxy runs as relayci with no_new_privs;
  - network.json is in the package and its manifest;
  - a second relay takes the guest back and gets new sockets from the init (it keeps no copy:
    the first ones went with the first relay).
"""
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from rootless_support import as_ordinary_user, require_ordinary  # noqa: E402
from runs_support import make_variant, stage, structured, text_of  # noqa: E402
import egress_support  # noqa: E402
from test_egress_local import PY_PROBES, curl, lead, proxy_status, step  # noqa: E402

RULES = "allowed.test,rebind.test"
WORLD = "RELAY_TEST_EGRESS_WORLD"


def variant(binary):
    require_ordinary()
    if not os.environ.get(WORLD):
        skip("run this file as root: it builds the egress world, then runs itself as relayci in it")
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env.update({"MCP_RELAY_GUEST_NETWORK": "allow", "MCP_RELAY_EGRESS_ALLOW": RULES,
                        "MCP_RELAY_LOCAL_OPTIONS": json.dumps({"display": "off"})})
    return v


def proxy_pids(state_dir):
    """The pids of the proxies that wrote the guests' network.jsonl (ids are "<pid>-<n>")."""
    pids = set()
    for root, _, files in os.walk(state_dir):
        if "network.jsonl" in files:
            for line in open(os.path.join(root, "network.jsonl")):
                rec = json.loads(line)
                if "id" in rec:
                    pids.add(int(rec["id"].split("-")[0]))
    return pids


def test_allow_without_root(binary):
    v = variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            assert g["network"] == "allow", g
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            res, s = step(r, name, " ; ".join([
                curl("http://allowed.test/"), curl("-k https://allowed.test/"),
                curl("--socks5-hostname 127.0.0.1:3128 http://allowed.test/"),
                curl("http://other.test/"), curl("http://rebind.test/"), curl("http://192.0.2.10/")]))
            out = s["stdout"]
            assert out.count("hello from 192.0.2.10") == 3, out
            for want in ("egress refused other.test:80: no rule names it; the rule other.test:80 in "
                         "MCP_RELAY_EGRESS_ALLOW would allow it (MCP_RELAY_GUEST_NETWORK=allow",
                         "egress refused rebind.test:80 (127.0.0.1): 127.0.0.1 is loopback space",
                         "egress refused 192.0.2.10:80: an IP literal (192.0.2.10) needs an address rule"):
                assert want in out, (want, out)
            assert s["network"]["allowed"] == 3 and s["network"]["refused"] == 3, s["network"]
            assert "3 connections refused by the egress policy (other.test:80, rebind.test:80, " \
                   "192.0.2.10:80)" in lead(res), lead(res)
            res, s = step(r, name, PY_PROBES, language="python")
            p = json.loads(s["stdout"])
            for k in ("direct_tcp", "direct_tcp_dns_server", "direct_udp", "direct_ipv6"):
                assert p[k]["ok"] is False and p[k]["errno"] in ("ENETUNREACH", "EADDRNOTAVAIL"), (k, p)
            assert p["resolve_allowed"]["ok"] is True and p["resolve_allowed"]["value"] == "192.0.2.10", p
            assert p["resolve_unlisted"]["ok"] is False, p
            assert p["sni_pipelined"]["value"] == "HTTP/1.1 200 Connection established\r\n\r\n", p
            assert s["network"]["refused"] == 2 and s["network"]["lookupsRefused"] >= 1, s["network"]
            # The proxy: this user, nothing more to gain.
            pids = proxy_pids(v.state_dir)
            assert len(pids) == 1, pids
            st = proxy_status(pids.pop())
            assert st["Uid"] == [str(os.getuid())] * 4 and st["NoNewPrivs"] == ["1"], st
            assert st["CapEff"] == ["0000000000000000"], st
            assert st["Seccomp"] == ["2"], st   # the filter of egress/confine.c
            fin = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            ev = structured(fin)["evidencePath"]
            raw = open(os.path.join(ev, "network.json"), "rb").read()
            doc = json.loads(raw)
            entry = [e for e in json.load(open(os.path.join(ev, "manifest.json")))["records"]
                     if e["path"] == "network.json"]
            assert entry and entry[0]["sha256"] == hashlib.sha256(raw).hexdigest(), entry
            assert doc["policy"] == {"guestNetwork": "allow", "rules": RULES.split(",")}, doc["policy"]
            # 3 + 3 in the first step, and the probes' two TLS name mismatches.
            assert doc["totals"]["allowed"] == 3 and doc["totals"]["refused"] == 5, doc["totals"]
            refused = {(c["name"], c["reason"].split(";")[0]) for c in doc["connections"]
                       if c["decision"] == "refused" and c["protocol"] != "dns"}
            assert ("other.test", "no rule names it") in refused, refused
            for c in doc["connections"]:
                assert c["executionId"], c
    finally:
        v.cleanup()


def test_a_second_relay_gets_new_sockets(binary):
    v = variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            name = v.acquire(r)["guest"]
            assert stage(r, name)["isError"] is False
            res, s = step(r, name, curl("http://allowed.test/"))
            assert "hello from" in s["stdout"], s["stdout"]
        with v.relay() as r:
            r.initialize()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                st = structured(r.call_tool("relay_status"))
                if any(g["guest"] == name and g["phase"] in ("staged", "ready") for g in st["guests"]):
                    break
                time.sleep(0.2)
            res, s = step(r, name, curl("http://allowed.test/") + " ; " + curl("http://other.test/"))
            assert "hello from 192.0.2.10" in s["stdout"], s["stdout"]
            assert s["network"]["allowed"] == 1 and s["network"]["refused"] == 1, s["network"]
            fin = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            doc = json.load(open(os.path.join(structured(fin)["evidencePath"], "network.json")))
            assert doc["totals"]["allowed"] == 2 and doc["totals"]["refused"] == 1, doc["totals"]
    finally:
        v.cleanup()


if __name__ == "__main__":
    if os.geteuid() == 0:
        with egress_support.World("egress-rootless") as w:
            as_ordinary_user(__file__, prefix=w.relay_ns_prefix(), env_extra={WORLD: w.root})
    run_tests(globals())
