"""Runs inside the relay's namespace of the egress world (bench/egress/run.py): the real
egress proxy (`mcp-relay egress-proxy`, started as the relay starts it: listeners on fds 3-5,
its control socket on fd 6) against direct connections to the same host, alternately."""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

binary, rounds, connects, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
server_pid = int(sys.argv[5])
import resource
log = "/tmp/egress-bench-%d.jsonl" % os.getpid()

lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 3128)); lst.listen(1024)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 53))
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", 53)); tcp.listen(64)
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
fds = [lst.fileno(), udp.fileno(), tcp.fileno(), theirs.fileno()]


def child_fds():
    for i, fd in enumerate(fds):
        os.dup2(fd, 3 + i)


proxy = subprocess.Popen([binary, "egress-proxy", "--mode", "allow", "--rules", "allowed.test", "--log", log],
                         preexec_fn=child_fds, pass_fds=(3, 4, 5, 6), stdout=subprocess.DEVNULL)
theirs.close()
ours.send(b"step bench"); ours.recv(8)
floor = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.py"),
                          "3129", "192.0.2.10", "80"], stdout=subprocess.PIPE, text=True)
assert floor.stdout.readline().strip() == "ready"


def direct_connect():
    t = time.perf_counter()
    addr = socket.getaddrinfo("allowed.test", 80, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    s = socket.create_connection(addr)
    dt = time.perf_counter() - t
    s.close()
    return dt


def proxy_connect():
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    dt = time.perf_counter() - t
    assert head.startswith(b"HTTP/1.1 200"), head
    s.close()
    return dt


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


relay_cpu = {"proxy": [], "floor": []}  # the proxy's (or the floor forwarder's) own CPU
curl_cpu = {"direct": [], "proxy": [], "floor": []}
server_cpu = {"direct": [], "proxy": [], "floor": []}


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def download(mode):
    """One download of `size` bytes: direct, through the proxy, or through the floor forwarder."""
    middle = {"proxy": proxy.pid, "floor": floor.pid}.get(mode)
    before = cpu_s(middle) if middle else 0
    before_curl, before_server = children_cpu(), cpu_s(server_pid)
    argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}",
            "http://allowed.test/big/%d" % size]
    argv[1:1] = {"direct": ["--noproxy", "*"], "proxy": ["-x", "http://127.0.0.1:3128"],
                 "floor": ["--noproxy", "*", "--connect-to", "allowed.test:80:127.0.0.1:3129"]}[mode]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    assert int(out[0]) == size, out
    if middle:
        relay_cpu[mode].append(cpu_s(middle) - before)
    curl_cpu[mode].append(children_cpu() - before_curl)  # curl is the only child reaped meanwhile
    server_cpu[mode].append(cpu_s(server_pid) - before_server)
    return float(out[1])


result = {"connect_direct_ms": [], "connect_proxy_ms": [], "download_direct_s": [], "download_proxy_s": [],
          "download_floor_s": []}
for i in range(50):  # warm-up: caches, the server's threads
    direct_connect(); proxy_connect()
for i in range(connects):
    result["connect_direct_ms"].append(direct_connect() * 1000)
    result["connect_proxy_ms"].append(proxy_connect() * 1000)
modes = ["direct", "proxy", "floor"]
for i in range(rounds):  # each round in another order, so no mode always follows another
    for mode in modes[i % 3:] + modes[:i % 3]:
        result["download_%s_s" % mode].append(download(mode))
ours.close()
proxy.wait(timeout=10)
floor.kill()
med = {k: statistics.median(v) for k, v in result.items()}
per_gib = (1 << 30) / size
cpu = {m: {"server": round(statistics.median(server_cpu[m]) * per_gib, 3),
           "curl": round(statistics.median(curl_cpu[m]) * per_gib, 3)} for m in curl_cpu}
for m in ("proxy", "floor"):
    cpu[m][m] = round(statistics.median(relay_cpu[m]) * per_gib, 3)


def bound(stages):
    return max(max(stages.values()), sum(stages.values()) / 2)


summary = {
    "medians": med,
    "added_connect_ms": med["connect_proxy_ms"] - med["connect_direct_ms"],
    "throughput_direct_MiBps": size / med["download_direct_s"] / 2**20,
    "throughput_proxy_MiBps": size / med["download_proxy_s"] / 2**20,
    "throughput_floor_MiBps": size / med["download_floor_s"] / 2**20,
    "throughput_ratio": med["download_direct_s"] / med["download_proxy_s"],
    "floor_ratio": med["download_direct_s"] / med["download_floor_s"],
    "proxy_vs_floor": med["download_floor_s"] / med["download_proxy_s"],
    "records": sum(1 for _ in open(log)),
    "cpu_s_per_GiB": cpu,
    "cpu_total_s_per_GiB": {m: round(sum(v.values()), 3) for m, v in cpu.items()},
    # Load-independent: the wall time the CPU alone allows on two free cores (every stage runs at
    # once, none faster than its own CPU, all together no faster than their sum over 2 cores).
    "cpu_model_ratio_2_cores": {m: round(bound(cpu["direct"]) / bound(cpu[m]), 3) for m in ("proxy", "floor")},
    "samples": result,
}
os.unlink(log)
print(json.dumps(summary))
