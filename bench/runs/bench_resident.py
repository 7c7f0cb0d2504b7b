#!/usr/bin/env python3
"""bench/runs/bench_resident.py: runs on the resident receiver's channel (spec/guest.md §17) against
the anchors of issue 24, medians and ratios side by side in one sitting (bench/runs/README.md,
"Resident receiver"):

  ssh      relay_script `true` without snapshots over transfer-ssh: resident channel, the one
           round trip (MCP_RELAY_RESIDENT=off) and `ssh host true` over an open master, interleaved
  docker   relay_script `true` on machine-docker (Podman) against `podman exec CONTAINER true`
  local    relay_script `true` on machine-local (resident and one-shot), with the fsync-family
           calls per run on the host (the relay) and in the guest (receiver serve), each timed
           (strace -T), which gives the durability floor
  gui      1280x800 with snapshots over transfer-ssh, after-image attached against pending
           (RELAY_RECEIVER_ATTACH=off in the guest) and against the ssh run without snapshots
  soak     1,000 runs of `true` back to back on one machine-local guest: relay RSS and fds,
           `receiver serve` processes, every run recorded once in order

Every run's phases come from the relay's own marks (MCP_RELAY_DEBUG=1: "relay_script <id>:
<phase> took N ms"), medians per phase printed beside each figure.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import runs_support as rs  # noqa: E402

MARK = re.compile(r"relay_script (run-[0-9a-f]+): (.+) took (\d+) ms")


def ms(x):
    return x * 1000.0


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def line(name, xs):
    print("  %-34s median %6.1f ms   %s" % (name, ms(med(xs)), " ".join("%.0f" % ms(x) for x in xs)), flush=True)


def phases(r, since):
    """{phase: [ms...]} of the runs whose marks the relay wrote after byte `since` of its stderr."""
    out = {}
    with open(r.stderr_path, errors="replace") as f:
        f.seek(since)
        for m in MARK.finditer(f.read()):
            out.setdefault(m.group(2), []).append(int(m.group(3)))
    return out


def stderr_size(r):
    return os.path.getsize(r.stderr_path)


def print_phases(label, ph):
    if ph:
        print("  phases of %s (medians): %s" % (label, "; ".join(
            "%s %.1f ms" % (k, statistics.median(v)) for k, v in ph.items())), flush=True)


def script_true(r, guest, n, code="true"):
    samples, channels = [], set()
    for _ in range(n):
        res = None

        def go():
            nonlocal res
            res = rs.run(r, guest, code)
        samples.append(timed(go))
        s = rs.structured(res)
        assert res["isError"] is False, rs.text_of(res)
        channels.add(s.get("channel"))
    return samples, channels


def bench_ssh(args):
    import bench_runs as br
    v, why = rs.make_variant(args.binary, "ssh")
    if v is None:
        print("ssh: cannot run: %s" % why)
        return None
    try:
        ssh = json.load(open(v.control))["leaseExtra"]["ssh"]
        control = os.path.join(v.root, "raw.sock")
        base = br.ssh_base(ssh, control)
        subprocess.run(base + ["-o", "ControlMaster=yes", "-o", "ControlPersist=600", "-N", "-f", "127.0.0.1"],
                       check=True)
        with v.relay(MCP_RELAY_DEBUG="1") as ra, v.relay(MCP_RELAY_DEBUG="1", MCP_RELAY_RESIDENT="off") as ro:
            guests, gs_roots = [], []
            for r in (ra, ro):
                r.initialize()
                g = v.acquire(r)
                assert rs.stage(r, g["guest"])["isError"] is False
                guests.append(g["guest"])
                gs_roots.append(g["guestRoot"])
                script_true(r, g["guest"], 3)
            res, one, raw = [], [], []
            sa, so = stderr_size(ra), stderr_size(ro)
            chans = set()
            for _ in range(args.runs):
                s, c = script_true(ra, guests[0], 1)
                res += s
                chans |= c
                one += script_true(ro, guests[1], 1)[0]
                raw.append(timed(lambda: subprocess.run(base + ["127.0.0.1", "true"], check=True)))
            assert chans == {"resident"}, chans
            print("transfer-ssh, relay_script `true` without snapshots, %d rounds interleaved:" % args.runs)
            line("resident channel", res)
            line("one round trip (MCP_RELAY_RESIDENT=off)", one)
            line("ssh host true (open master)", raw)
            print("  ratio resident / ssh true %.2fx (target <= 0.8x); one-shot / ssh true %.2fx"
                  % (med(res) / med(raw), med(one) / med(raw)), flush=True)
            print_phases("resident", phases(ra, sa))
            print_phases("one-shot", phases(ro, so))
            root = gs_roots[0]
            serve = serve_pids(root)
            rt = channel_round_trip(base + ["127.0.0.1", root + "/receiver", "serve", "--root", root])
            target = durability_floor(ra, serve[0] if len(serve) == 1 else None, v.root,
                                      lambda: script_true(ra, guests[0], 1), 20, rt, "ssh")
            print("  resident %.1f ms against the floor target %.1f ms: %s; against 0.8 x ssh true (%.1f ms): %s"
                  % (ms(med(res)), ms(target), "met" if med(res) <= target else "not met", ms(0.8 * med(raw)),
                     "met" if med(res) <= 0.8 * med(raw) else "not met"), flush=True)
        subprocess.run(base + ["-O", "exit", "127.0.0.1"], stderr=subprocess.DEVNULL)
        return med(res)
    finally:
        v.cleanup()


def bench_docker(args):
    import docker_support
    why = docker_support.plugin_missing(args.binary) or docker_support.engine_missing()
    if why:
        print("docker: cannot run: %s" % why)
        return
    with docker_support.Engine() as eng:
        img = eng.image("minimal")
        with eng.relay(args.binary, {"minimal": img}, MCP_RELAY_SESSION="bench-resident", MCP_RELAY_DEBUG="1") as r:
            r.initialize()
            acq = docker_support.acquire(r, "minimal")
            g, vm = acq["guest"], acq["vm"]
            assert r.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
            script_true(r, g, 3)
            cli = ["podman", "--url", eng.endpoint] if eng.cli[0] == "podman" else eng.cli
            subprocess.run(cli + ["exec", vm, "true"], check=True)
            ours, raw = [], []
            since = stderr_size(r)
            for _ in range(args.runs):
                s, c = script_true(r, g, 1)
                assert c == {"resident"}, c
                ours += s
                raw.append(timed(lambda: subprocess.run(cli + ["exec", vm, "true"], check=True)))
            print("machine-docker (Podman %s), relay_script `true`, %d rounds interleaved:"
                  % ("runc" if eng.runtime else "default runtime", args.runs))
            line("resident channel", ours)
            line("podman exec CONTAINER true", raw)
            print("  ratio %.2fx (target <= 0.25x)" % (med(ours) / med(raw)), flush=True)
            print_phases("resident", phases(r, since))
            root = acq["guestRoot"]
            serve = serve_pids(root)
            rt = channel_round_trip(cli + ["exec", "-i", vm, root + "/receiver", "serve", "--root", root])
            target = durability_floor(r, serve[0] if len(serve) == 1 else None, eng.dir,
                                      lambda: script_true(r, g, 1), 20, rt, "docker")
            print("  resident %.1f ms against the floor target %.1f ms: %s; against 0.25 x podman exec (%.1f ms): %s"
                  % (ms(med(ours)), ms(target), "met" if med(ours) <= target else "not met", ms(0.25 * med(raw)),
                     "met" if med(ours) <= 0.25 * med(raw) else "not met"), flush=True)


def strace_counts(pid, out):
    return subprocess.Popen(["strace", "-f", "-qq", "-T", "-y", "-e", "trace=fsync,fdatasync,syncfs,sync,msync",
                             "-o", out, "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# Host files the run's own path makes durable before it answers (spec/guest.md §16.2 item 1, the host
# receipt, the event, the guest's record); the rest is the background step download's.
ON_PATH = ("/host/submissions", "/host/scripts", "/host/requests", "/host/receiver-receipts", "/host/receipts",
           "/host/events", "/guests/")


def strace_read(path, on_path_only=False):
    calls, secs = 0, []
    with open(path) as f:
        for ln in f:
            m = re.search(r"(fsync|fdatasync|syncfs|sync|msync)\(\d+<([^>]*)>.*<([0-9.]+)>", ln)
            if m and (not on_path_only or any(k in m.group(2) for k in ON_PATH)):
                calls += 1
                secs.append(float(m.group(3)))
    return calls, secs


def refused_request():
    """A request any `receiver serve` refuses at once and goes on (its parts fail their hashes:
    nothing is written, nothing runs): one bare round trip on an open channel."""
    req, script = b'{"executionId":"run-rt"}', b"true\n"
    header = {"protocol": 1, "parts": [
        {"name": "request", "path": "requests/run-rt.json", "bytes": len(req), "sha256": "0" * 64},
        {"name": "script", "path": "streamed/run-rt.sh", "bytes": len(script), "sha256": "0" * 64}]}
    return json.dumps(header).encode() + b"\n" + req + script


def channel_round_trip(argv, n=50):
    """The median of n bare round trips on a `receiver serve` started by argv (its standard input
    and output pipes: over ssh, a session channel of the open master)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    bad = refused_request()

    def ask():
        p.stdin.write(bad)
        p.stdin.flush()
        line = p.stdout.readline()
        assert b'"refused"' in line, line
    try:
        for _ in range(5):
            ask()
        return med([timed(ask) for _ in range(n)])
    finally:
        p.stdin.close()
        p.wait(timeout=10)


def durability_floor(r, serve_pid, root, run_once, n, rt_s, label):
    """Counts and times (strace -T) the fsync-family calls of n runs on the relay and the guest's
    serve; prints the floor (the sum of a run's on-path calls) and the floor target
    1.2 x floor + a bare round trip (rt_s) on the open channel."""
    host_out, guest_out = os.path.join(root, "%s-host.strace" % label), os.path.join(root, "%s-guest.strace" % label)
    time.sleep(3.0)  # the step downloads of earlier rounds end before the count starts
    th = strace_counts(r.proc.pid, host_out)
    tg = strace_counts(serve_pid, guest_out) if serve_pid else None
    time.sleep(1.0)
    traced = [timed(run_once) for _ in range(n)]
    time.sleep(3.0)
    for t in (th, tg):
        if t:
            t.send_signal(signal.SIGINT)
            t.wait(timeout=10)
    hc, hs = strace_read(host_out)
    pc, ps = strace_read(host_out, on_path_only=True)
    gc, gsx = strace_read(guest_out) if tg else (0, [])
    floor = (sum(ps) + sum(gsx)) / n
    print("  fsync-family calls per run (strace -f, %d runs): host %.1f in all, %.1f on the run's path; guest %.1f"
          % (n, hc / n, pc / n, gc / n))
    print("  each call timed: host median %.2f ms, guest median %.2f ms; durability floor %.2f ms; a bare round "
          "trip on the open channel %.2f ms; floor target 1.2 x floor + round trip = %.2f ms (under strace the "
          "run took %.1f ms)" % (ms(med(hs)), ms(med(gsx)), ms(floor), ms(rt_s), ms(1.2 * floor + rt_s),
                                 ms(med(traced))), flush=True)
    return 1.2 * floor + rt_s


def bare_round_trip(binary, n=50):
    """A request serve refuses at once (its script part fails its hash: nothing is written, nothing
    runs) on pipes of this host, as machine-local's stream is: one bare round trip."""
    from test_receiver_stdin import Guest
    from test_receiver_serve import Serve
    g = Guest(binary)
    try:
        s = Serve(g)
        data = g.request("run-rt", "true\n")
        header, rest = data.split(b"\n", 1)
        bad = header + b"\n" + rest[:-1] + b"X"
        for _ in range(5):
            s.ask(bad)
        xs = [timed(lambda: s.ask(bad)) for _ in range(n)]
        s.close()
        return med(xs)
    finally:
        g.close()


def serve_pids(root):
    want = "%s/receiver\0serve\0--root\0%s\0" % (root, root)
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d) as f:
                    if f.read() == want:
                        found.append(int(d))
            except OSError:
                pass
    return found


def bench_local(args):
    v, why = rs.make_variant(args.binary, "local")
    if v is None:
        print("machine-local: cannot run: %s" % why)
        return
    try:
        opts = '{"display":"off","maxGuests":2}'
        with v.relay(MCP_RELAY_LOCAL_OPTIONS=opts, MCP_RELAY_DEBUG="1") as ra, \
                v.relay(MCP_RELAY_LOCAL_OPTIONS=opts, MCP_RELAY_DEBUG="1", MCP_RELAY_RESIDENT="off") as ro:
            gs = []
            for k, r in enumerate((ra, ro)):
                r.initialize()
                g = v.acquire(r, task="resident%d" % k)
                assert rs.stage(r, g["guest"])["isError"] is False
                script_true(r, g["guest"], 3)
                gs.append(g)
            res, one = [], []
            sa, so = stderr_size(ra), stderr_size(ro)
            for _ in range(args.runs):
                s, c = script_true(ra, gs[0]["guest"], 1)
                assert c == {"resident"}, c
                res += s
                one += script_true(ro, gs[1]["guest"], 1)[0]
            print("machine-local, relay_script `true` through MCP, %d rounds interleaved:" % args.runs)
            line("resident channel", res)
            line("one round trip (MCP_RELAY_RESIDENT=off)", one)
            print("  target <= 8 ms: %s" % ("met" if ms(med(res)) <= 8 else "not met"), flush=True)
            print_phases("resident", phases(ra, sa))
            print_phases("one-shot", phases(ro, so))
            # fsync-family calls per run, each timed: the relay, and the guest's serve
            serve = serve_pids(gs[0]["guestRoot"])
            assert len(serve) == 1, serve
            host_out, guest_out = os.path.join(v.root, "host.strace"), os.path.join(v.root, "guest.strace")
            time.sleep(3.0)  # the step downloads of the rounds above end before the count starts
            th, tg = strace_counts(ra.proc.pid, host_out), strace_counts(serve[0], guest_out)
            time.sleep(1.0)
            n = 20
            traced = script_true(ra, gs[0]["guest"], n)[0]
            time.sleep(3.0)  # the traced runs' step downloads end (each makes one commit)
            for t in (th, tg):
                t.send_signal(signal.SIGINT)
                t.wait(timeout=10)
            hc, hs = strace_read(host_out)
            pc, ps = strace_read(host_out, on_path_only=True)
            gc, gsx = strace_read(guest_out)
            print("  fsync-family calls per run (strace -f, %d runs): host %.1f in all, %.1f on the run's path "
                  "(the rest: the background step download); guest %.1f (<= 6)" % (n, hc / n, pc / n, gc / n))
            if ps or gsx:
                floor = (sum(ps) + sum(gsx)) / n
                rt = bare_round_trip(args.binary)
                print("  each call timed: host median %.2f ms, guest median %.2f ms; the durability floor of a run "
                      "(the sum of its on-path calls) %.2f ms; a bare round trip on serve's pipes %.2f ms; so "
                      "the floor target 1.2 x floor + round trip = %.2f ms (under strace the run took %.1f ms)"
                      % (ms(med(hs)), ms(med(gsx)), ms(floor), ms(rt), ms(1.2 * floor + rt), ms(med(traced))),
                      flush=True)
    finally:
        v.cleanup()


def bench_gui(args, ssh_plain_ms):
    import bench_runs as br

    class A:
        pass
    a = A()
    a.binary, a.gui_runs = args.binary, args.gui_runs
    got = br.gui_attach(a)
    if ssh_plain_ms:
        print("  (the ssh run without snapshots of this sitting: %.1f ms)" % ms(ssh_plain_ms), flush=True)
    if ssh_plain_ms and got:
        attached, pending, one_shot = got
        print("  attached - the run without snapshots: %+.1f ms (target <= +60 ms); attached / pending %.2fx "
              "(target <= 1.15x); with one-shot captures %+.1f ms" % (attached - ms(ssh_plain_ms), attached / pending,
                                                                      one_shot - ms(ssh_plain_ms)), flush=True)


def bench_soak(args):
    v, why = rs.make_variant(args.binary, "local")
    if v is None:
        print("soak: cannot run: %s" % why)
        return
    try:
        with v.relay(MCP_RELAY_LOCAL_OPTIONS='{"display":"off"}') as r:
            r.initialize()
            g = v.acquire(r)
            guest, root = g["guest"], g["guestRoot"]
            assert rs.stage(r, guest)["isError"] is False
            script_true(r, guest, 20)

            def rss_fds():
                with open("/proc/%d/status" % r.proc.pid) as f:
                    rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                return rss, len(os.listdir("/proc/%d/fd" % r.proc.pid))
            rss0, fds0 = rss_fds()
            ids, t0 = [], time.monotonic()
            serves = set()
            for i in range(args.soak):
                res = rs.run(r, guest, "true")
                s = rs.structured(res)
                assert res["isError"] is False and s["channel"] == "resident", s
                ids.append(s["executionId"])
                if i % 100 == 99:
                    serves |= set(serve_pids(root))
            took = time.monotonic() - t0
            rss1, fds1 = rss_fds()
            # the guest's own record, read through the relay (the guest root is inside the guest)
            d = rs.diag(r, guest, "ls %s/state/receiver/receipts | wc -l; tr ',' '\\n' < "
                                  "%s/state/journal/events.jsonl | sed -n 's/^\"executionId\":\"\\(run-[0-9a-f]*\\)\".*/\\1/p' "
                                  "| uniq" % (root, root), timeout_ms=120000)
            out = d["output"] if isinstance(d.get("output"), str) else ""
            lines = out.split()
            receipts = int(lines[0]) if lines and lines[0].isdigit() else -1
            order = lines[1:]
            mine = [x for x in order if x in set(ids)]
            print("soak: %d runs of `true` on one machine-local guest in %.1f s (%.1f ms each):"
                  % (args.soak, took, ms(took / args.soak)))
            print("  relay RSS %d -> %d KiB (growth %d KiB, target <= 1024); fds %d -> %d; receiver serve "
                  "processes seen %d; receipts %d of %d; journal execution-start in order: %s"
                  % (rss0, rss1, rss1 - rss0, fds0, fds1, len(serves), receipts, len(ids) + 20,
                     "yes" if mine == ids else "no (%d found)" % len(mine)), flush=True)
    finally:
        v.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--gui-runs", type=int, default=15)
    ap.add_argument("--soak", type=int, default=1000)
    ap.add_argument("--only", default="ssh,docker,local,gui,soak")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    only = args.only.split(",")
    print("load average at start: %s (the machine is shared by seven helpers)" % open("/proc/loadavg").read().strip())
    plain = bench_ssh(args) if "ssh" in only else None
    if "docker" in only:
        bench_docker(args)
    if "local" in only:
        bench_local(args)
    if "gui" in only:
        bench_gui(args, plain)
    if "soak" in only:
        bench_soak(args)
    print("load average at end: %s" % open("/proc/loadavg").read().strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
