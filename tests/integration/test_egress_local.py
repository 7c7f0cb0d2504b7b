#!/usr/bin/env python3
"""Egress you can prove on machine-local as root (issue 23, docs/egress.md).

The relay runs in a namespace of the test whose only neighbour is the test's own world
(egress_support.World: dnsmasq and HTTP/HTTPS servers on documentation-range addresses).
The guest (allow, or internet) has loopback only; the relay's egress proxy listens in it.
Each case runs in a recorded step, so the step's result lead and network.json show it."""
import glob
import json
import os
import pwd
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import make_variant, run, stage, structured, text_of  # noqa: E402
import egress_support  # noqa: E402

RULES = "allowed.test,*.sub.test,rebind.test,private.test,203.0.113.9/32:80"

# Probes run in the guest with its own python (no proxy library: sockets by hand).
PY_PROBES = r'''
import errno, json, socket, ssl, sys, time
out = {}
def attempt(name, fn):
    t = time.monotonic()
    try:
        out[name] = {"ok": True, "value": fn()}
    except OSError as e:
        out[name] = {"ok": False, "errno": errno.errorcode.get(e.errno, str(e.errno)), "text": str(e)}
    out[name]["ms"] = round((time.monotonic() - t) * 1000, 1)
def tcp(addr, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(20); s.connect((addr, port)); s.close(); return "connected"
def udp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"\0" * 12, (addr, port)); s.close(); return "sent"
def resolve(name):
    return socket.gethostbyname(name)
def sni_mismatch():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
    head = s.recv(4096)
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    t = ctx.wrap_socket(s, server_hostname="other.test")
    t.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
    return head.decode().split("\r\n")[0] + " / " + t.recv(100).decode()
def sni_pipelined():
    # The ClientHello sent with the CONNECT request, in one write: it is checked all the same.
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    obj = ctx.wrap_bio(inc, outg, server_hostname="other.test")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n" + outg.read())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    return data[:200].decode(errors="replace")
attempt("direct_tcp", lambda: tcp("192.0.2.10", 80))
attempt("direct_tcp_dns_server", lambda: tcp("198.51.100.2", 53))
attempt("direct_udp", lambda: udp("198.51.100.2", 53))
attempt("direct_ipv6", lambda: tcp("2001:db8::10", 80, socket.AF_INET6))
attempt("resolve_allowed", lambda: resolve("allowed.test"))
attempt("resolve_unlisted", lambda: resolve("other.test"))
attempt("sni_mismatch", sni_mismatch)
attempt("sni_pipelined", sni_pipelined)
print(json.dumps(out))
'''

PARALLEL = r'''
import concurrent.futures, socket
def one(i):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return data.split(b"\r\n")[0]
with concurrent.futures.ThreadPoolExecutor(500) as ex:
    heads = list(ex.map(one, range(500)))
print(sum(1 for h in heads if h.endswith(b"200 OK")), "of", len(heads))
'''


def proxy_status(pid):
    """/proc/<pid>/status as {field: [words]}."""
    fields = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, val = line.partition(":")
            fields[k] = val.split()
    return fields


def lead(res):
    return text_of(res).split("\n")[0]


def curl(args):
    return "curl -s -S --max-time 20 %s 2>&1; echo \" rc=$?\"" % args


class Case:
    def __init__(self, binary, network="allow", rules=RULES):
        self.world = egress_support.World()
        v, why = make_variant(binary, "local")
        if v is None:
            self.world.close()
            skip(why)
        v.binary = self.world.relay_command(binary)
        v.extra_env.update({"MCP_RELAY_GUEST_NETWORK": network, "MCP_RELAY_EGRESS_ALLOW": rules,
                            "MCP_RELAY_LOCAL_OPTIONS": json.dumps({"display": "off"})})
        self.v = v

    def close(self):
        self.v.cleanup()
        self.world.close()

    def log_path(self):
        found = glob.glob(os.path.join(self.v.state_dir, "*", "guests", "*", "network.jsonl"))
        return found[0] if found else None


def step(r, guest, code, language="shell"):
    res = run(r, guest, code, language=language, timeout=300)
    assert res["isError"] is False, text_of(res)
    return res, structured(res)


def test_allow_policy_cases(binary):
    c = Case(binary)
    try:
        with c.v.relay() as r:
            r.initialize()
            g = c.v.acquire(r)
            assert g["network"] == "allow", g
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            # 1. allowed name, http and https (CONNECT), and SOCKS5.
            res, s = step(r, name, " ; ".join([
                curl("http://allowed.test/"), curl("-k https://allowed.test/"),
                curl("--socks5-hostname 127.0.0.1:3128 http://allowed.test/"),
                curl("http://api.sub.test/")]))
            out = s["stdout"]
            assert out.count("hello from 192.0.2.10") == 4, out
            assert s["network"]["allowed"] == 4 and s["network"]["refused"] == 0, s["network"]
            assert "refused by the egress policy" not in lead(res), lead(res)
            # The proxy started by this root relay gave up root once its sockets were open.
            pids = {int(json.loads(line)["id"].split("-")[0]) for line in open(c.log_path()) if '"id"' in line}
            assert len(pids) == 1, pids
            st = proxy_status(pids.pop())
            nobody = pwd.getpwnam("nobody")
            assert st["Uid"] == [str(nobody.pw_uid)] * 4 and st["Gid"] == [str(nobody.pw_gid)] * 4, st
            assert st["Groups"] == [] and st["NoNewPrivs"] == ["1"] and st["CapEff"] == ["0000000000000000"], st
            assert st["Seccomp"] == ["2"], st   # the filter of egress/confine.c
            # 2. refusals, each in words at once.
            res, s = step(r, name, " ; ".join([
                curl("http://other.test/"),                      # unlisted name
                curl("http://sub.test/"),                        # *.sub.test is subdomains only
                curl("http://rebind.test/"),                     # allowed name -> 127.0.0.1
                curl("http://private.test/"),                    # allowed name -> 10.1.2.3
                curl("http://192.0.2.10/"),                      # IP literal without a rule
                curl("-p http://allowed.test:8080/"),            # CONNECT to a port not allowed
                curl("-H 'Host: other.test' http://allowed.test/"),  # Host mismatch
                curl("-k https://doh.test/dns-query?dns=AAAB"),  # DoH to an unlisted resolver
                curl("--socks5-hostname 127.0.0.1:3128 http://other.test/"),
                curl("http://203.0.113.9/"),                     # literal allowed by its CIDR rule
            ]))
            out = s["stdout"]
            for want in ("egress refused other.test:80: no rule names it; the rule other.test:80 in "
                         "MCP_RELAY_EGRESS_ALLOW would allow it (MCP_RELAY_GUEST_NETWORK=allow",
                         "egress refused sub.test:80: no rule names it",
                         "egress refused rebind.test:80 (127.0.0.1): 127.0.0.1 is loopback space (127.0.0.0/8)",
                         "egress refused private.test:80 (10.1.2.3): 10.1.2.3 is private space (10.0.0.0/8)",
                         "egress refused 192.0.2.10:80: an IP literal (192.0.2.10) needs an address rule; the "
                         "rule 192.0.2.10/32:80",
                         "CONNECT tunnel failed, response 403",
                         "the Host header other.test differs from the request's allowed.test:80",
                         "hello from 203.0.113.9:80"):
                assert want in out, (want, out)
            assert "(97)" in out or "SOCKS" in out, out   # curl's words for SOCKS5 reply 0x02
            assert out.count("hello from") == 1, out
            net = s["network"]
            assert net["refused"] == 9 and net["allowed"] == 1, net
            assert "9 connections refused by the egress policy (other.test:80, sub.test:80, rebind.test:80" in lead(res), lead(res)
            # 3. what ignores the proxy fails at once; UDP and IPv6 have nowhere to go; names
            # outside the policy do not resolve; a TLS name other than the CONNECT name is cut.
            res, s = step(r, name, PY_PROBES, language="python")
            p = json.loads(s["stdout"])
            for k in ("direct_tcp", "direct_tcp_dns_server", "direct_udp", "direct_ipv6"):
                assert p[k]["ok"] is False and p[k]["errno"] in ("ENETUNREACH", "EADDRNOTAVAIL"), (k, p)
            print("    direct attempts failed after (ms):", {k: p[k]["ms"] for k in p if k.startswith("direct")})
            assert p["resolve_allowed"] == {"ok": True, "value": "192.0.2.10", "ms": p["resolve_allowed"]["ms"]}, p
            assert p["resolve_unlisted"]["ok"] is False, p
            assert p["sni_mismatch"]["ok"] is False or "hello" not in p["sni_mismatch"].get("value", ""), p
            assert s["network"]["lookupsRefused"] >= 1, s["network"]
            assert p["sni_pipelined"]["ok"] is True, p
            assert p["sni_pipelined"]["value"] == "HTTP/1.1 200 Connection established\r\n\r\n", p
            assert s["network"]["refused"] == 2, s["network"]   # the two TLS name mismatches
            # 4. 500 parallel connections through the proxy.
            res, s = step(r, name, PARALLEL, language="python")
            assert s["stdout"].strip() == "500 of 500", s["stdout"]
            assert s["network"]["allowed"] == 500, s["network"]
            # 5. network.json in the package, listed in the manifest.
            fin = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            ev = structured(fin)["evidencePath"]
            doc = json.load(open(os.path.join(ev, "network.json")))
            manifest = json.load(open(os.path.join(ev, "manifest.json")))
            import hashlib
            entry = [e for e in manifest["records"] if e["path"] == "network.json"]
            raw = open(os.path.join(ev, "network.json"), "rb").read()
            assert entry and entry[0]["sha256"] == hashlib.sha256(raw).hexdigest() and entry[0]["bytes"] == len(raw), \
                manifest["records"]
            assert doc["policy"] == {"guestNetwork": "allow", "rules": RULES.split(",")}, doc["policy"]
            conns = doc["connections"]
            assert doc["totals"]["allowed"] == 505 and doc["totals"]["refused"] == 11, doc["totals"]
            keys = {"id", "executionId", "time", "name", "port", "address", "decision", "rule", "reason",
                    "bytesOut", "bytesIn", "durationMs", "protocol", "error"}
            for cn in conns:
                assert keys <= set(cn), cn
                assert cn["executionId"], cn
            ok = [cn for cn in conns if cn["name"] == "allowed.test" and cn["protocol"] == "connect"][0]
            assert ok["decision"] == "allowed" and ok["rule"] == "allowed.test" and ok["address"] == "192.0.2.10", ok
            assert ok["bytesIn"] > 1000 and ok["bytesOut"] > 100, ok
            rb = [cn for cn in conns if cn["name"] == "rebind.test"][0]
            assert rb["decision"] == "refused" and "loopback" in rb["reason"], rb
            # The viewer shows each step's connections.
            html = open(os.path.join(ev, "index.html")).read()
            assert "<dd>4 allowed, 0 refused</dd>" in html, html[:2000]
            assert "<dd>1 allowed, 9 refused (other.test:80, sub.test:80, rebind.test:80" in html
            assert "<dd>500 allowed, 0 refused</dd>" in html
    finally:
        c.close()


def test_proxy_killed_mid_download(binary):
    c = Case(binary)
    try:
        with c.v.relay() as r:
            r.initialize()
            g = c.v.acquire(r)
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            killed = {}

            def killer():
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    path = c.log_path()
                    if path and "/slow" not in open(path).read() and '"phase":"start"' in open(path).read():
                        for line in open(path):
                            rec = json.loads(line)
                            if rec.get("phase") == "start":
                                pid = int(rec["id"].split("-")[0])
                                time.sleep(0.5)
                                os.kill(pid, signal.SIGKILL)
                                killed["pid"] = pid
                                return
                    time.sleep(0.05)
            t = threading.Thread(target=killer)
            t.start()
            res, s = step(r, name, curl("-o /dev/null http://allowed.test/slow") + " ; sleep 1; " +
                          curl("http://allowed.test/"))
            t.join()
            assert killed, "the proxy was not found"
            assert "the egress proxy was killed by signal 9" in lead(res), lead(res)
            assert "1 connection cut; it was started again" in lead(res), lead(res)
            assert "hello from 192.0.2.10" in s["stdout"], s["stdout"]   # the proxy is back
            fin = r.call_tool("relay_finish", {"guest": name}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            doc = json.load(open(os.path.join(structured(fin)["evidencePath"], "network.json")))
            assert len(doc["proxyStops"]) == 1 and "signal 9" in doc["proxyStops"][0]["detail"], doc["proxyStops"]
            cut = [cn for cn in doc["connections"] if cn["error"] and cn["error"].startswith("cut:")]
            assert len(cut) == 1 and cut[0]["name"] == "allowed.test", doc["connections"]
            assert doc["totals"]["allowed"] == 2, doc["totals"]
    finally:
        c.close()


def test_relay_restart_brings_the_way_out_back(binary):
    c = Case(binary)
    try:
        with c.v.relay() as r:
            r.initialize()
            name = c.v.acquire(r)["guest"]
            assert stage(r, name)["isError"] is False
            res, s = step(r, name, curl("http://allowed.test/"))
            assert "hello from" in s["stdout"], s["stdout"]
        # The relay is gone (the guest is paused, kept): nothing listens in the guest now.
        with c.v.relay() as r:
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
        c.close()


def test_internet_means_every_public_destination(binary):
    c = Case(binary, network="internet", rules="")
    try:
        with c.v.relay() as r:
            r.initialize()
            g = c.v.acquire(r)
            name = g["guest"]
            assert stage(r, name)["isError"] is False
            res, s = step(r, name, " ; ".join([curl("http://other.test/"), curl("http://192.0.2.10:8080/"),
                                               curl("http://rebind.test/"), curl("http://127.0.0.2:8080/"),
                                               curl("--noproxy '*' --max-time 5 http://192.0.2.10/")]))
            out = s["stdout"]
            assert out.count("hello from 192.0.2.10") == 2, out
            assert "127.0.0.1 is loopback space" in out, out
            assert "MCP_RELAY_GUEST_NETWORK=internet" in out, out
            assert " rc=7" in out, out   # direct: no route
            assert "127.0.0.2 is loopback space" in out, out
            assert s["network"]["refused"] == 2, s["network"]
    finally:
        c.close()


if __name__ == "__main__":
    run_tests(globals())
