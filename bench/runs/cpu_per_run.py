#!/usr/bin/env python3
"""bench/runs/cpu_per_run.py BINARY N: CPU per resident relay_script of `true` over transfer-ssh (the whole
machine from /proc/stat, and the relay with its children) against `ssh host true`; GAP=seconds between
runs (bench/runs/README.md, "Step downloads on the resident channel")."""
import os, sys, time, subprocess, statistics, json
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration")); sys.path.insert(0, os.path.join(SRC, "bench", "runs"))
import runs_support as rs, bench_runs as br
binary = sys.argv[1]; n = int(sys.argv[2])
def busy():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); return sum(v) - v[3] - v[4], sum(v)
def proc_cpu(pid):
    st = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])
v, why = rs.make_variant(binary, "ssh")
try:
    ssh = json.load(open(v.control))["leaseExtra"]["ssh"]
    control = os.path.join(v.root, "raw.sock"); base = br.ssh_base(ssh, control)
    subprocess.run(base + ["-o", "ControlMaster=yes", "-o", "ControlPersist=600", "-N", "-f", "127.0.0.1"], check=True)
    with v.relay() as r:
        r.initialize(); g = v.acquire(r); name = g["guest"]
        assert rs.stage(r, name)["isError"] is False
        for i in range(5): rs.run(r, name, "true")
        time.sleep(2)
        for label, fn in (("relay resident", lambda: rs.run(r, name, "true")), ("ssh true", lambda: subprocess.run(base + ["127.0.0.1", "true"], check=True))):
            b0, t0 = busy(); p0 = proc_cpu(r.proc.pid); w = []
            for i in range(n):
                a = time.perf_counter(); fn(); w.append((time.perf_counter() - a) * 1000); time.sleep(float(os.environ.get("GAP", "0")))
            time.sleep(2 if label.startswith("relay") else 0)
            b1, t1 = busy(); p1 = proc_cpu(r.proc.pid)
            print("%s: wall median %.1f ms; machine busy CPU per op %.1f ms (relay proc+children %.1f ms)" % (label, statistics.median(w), (b1 - b0) * 10.0 / n, (p1 - p0) * 10.0 / n))
    subprocess.run(base + ["-O", "exit", "127.0.0.1"], stderr=subprocess.DEVNULL)
finally:
    v.cleanup()
