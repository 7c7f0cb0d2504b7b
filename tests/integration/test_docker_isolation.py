#!/usr/bin/env python3
"""machine-docker's isolation promises, checked from inside a real guest (docker_support.py):
the guest cannot reach this host's loopback or its other addresses (network "none"), cannot
see the engine's socket, cannot start more processes than its pids limit, and a diagnostic
script that runs past its time limit has its whole process group killed."""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import acquire, diag, engines, plugin_missing, sh  # noqa: E402

COUNT_PROCS = 'n=0; for p in /proc/[0-9]*; do [ -r "$p/comm" ] && read c < "$p/comm" && [ "$c" = "%s" ] && ' \
              'n=$((n+1)); done; echo "$n"'
KILL_PROCS = 'for p in /proc/[0-9]*; do [ -r "$p/comm" ] && read c < "$p/comm" && [ "$c" = "%s" ] && ' \
             'kill "${p#/proc/}"; done; true'


def no_sleep_left(r, g, kill=False):
    """True once no `sleep` runs in the guest (exits take a moment to be reaped). With `kill`,
    each attempt kills what it finds first (a fork may still have been on its way to exec)."""
    for _ in range(40):
        res = diag(r, g, ((KILL_PROCS % "sleep") + "; sleep 0.2; " if kill else "") + COUNT_PROCS % "sleep")
        if res["outcome"].get("exitStatus", {}).get("code") == 0 and res["output"].strip() == "0":
            return True
        time.sleep(0.5)
    print("    still running:", res["outcome"], res["output"][:500], flush=True)
    return False


def host_addresses():
    addrs = {"127.0.0.1"}
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outbound address
        addrs.add(s.getsockname()[0])
        s.close()
    except OSError:
        pass
    return sorted(addrs)


def listener(addr):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, 0))
    srv.listen(8)
    srv.settimeout(0.2)
    hits = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, peer = srv.accept()
                hits.append(peer)
                c.close()
            except OSError:
                continue
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, hits, stop, t


def test_isolation(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    for eng in engines():
        images = {"full": eng.image("full")}
        with eng.relay(binary, images, extra_options={"limits": {"pids": 48}}) as r:
            r.initialize()
            g = acquire(r, "full")["guest"]

            # 1. No way out to this host: its loopback and its other addresses.
            for addr in host_addresses():
                srv, hits, stop, t = listener(addr)
                port = srv.getsockname()[1]
                out = sh(r, g, "if bash -c 'echo hi > /dev/tcp/%s/%d' 2>/dev/null; then echo reached; "
                               "else echo refused; fi" % (addr, port))
                stop.set()
                t.join()
                srv.close()
                assert out.strip() == "refused" and hits == [], (addr, out, hits)
            # Only the guest's own loopback exists.
            ifaces = sh(r, g, "ls /sys/class/net")
            assert ifaces.split() == ["lo"], ifaces

            # 2. The engine's socket is not inside, nor any Docker or Podman socket.
            out = sh(r, g, "for p in %s /run/podman/podman.sock /var/run/docker.sock /run/docker.sock "
                           "/var/run/podman; do [ -e \"$p\" ] && echo \"present $p\"; done; "
                           "find / -xdev -type s 2>/dev/null; cat /proc/mounts; true" % eng.socket)
            assert "present" not in out and "podman.sock" not in out and "docker.sock" not in out, out
            assert eng.socket not in out, out

            # 3. The pids limit holds: 48 processes at most, whatever the guest tries.
            out = diag(r, g, "(i=0; while [ $i -lt 120 ]; do sleep 60 & i=$((i+1)); done) 2>/dev/null; " +
                       (COUNT_PROCS % "sleep") + "; " + KILL_PROCS % "sleep", timeout_ms=60000)
            lines = [ln for ln in out["output"].splitlines() if ln.strip().isdigit()]
            assert lines and 0 < int(lines[-1]) < 48, out
            assert no_sleep_left(r, g, kill=True), "the sleeps were not killed"

            # 4. A diagnostic script past its time limit: its whole group is killed.
            res = diag(r, g, "sleep 201 & sh -c 'sleep 202' & sleep 203", timeout_ms=2000)
            assert res["outcome"]["kind"] == "uncertain" and res["outcome"]["exitStatus"]["signal"] == "SIGKILL", res
            assert "did not end within 2 s" in res["outcome"]["diagnostic"], res["outcome"]
            assert no_sleep_left(r, g), "a sleep survived the timeout"

            # 5. What a command leaves running does not hold its step open (spec/guest.md §16.1): a
            # background writer keeps the output stream busy, the step still ends with its shell.
            res = diag(r, g, "bash -c 'while :; do echo tick; sleep 0.05; done' & echo started", timeout_ms=30000)
            assert res["outcome"] == {"kind": "completed", "exitStatus": {"code": 0, "signal": None}}, res
            assert "started" in res["output"], res
            left = sh(r, g, COUNT_PROCS % "bash").strip()
            assert left == "1", "the writer did not survive its step: %s bash processes" % left
            sh(r, g, KILL_PROCS % "bash")

            rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
            assert rel["isError"] is False, rel


if __name__ == "__main__":
    run_tests(globals())
