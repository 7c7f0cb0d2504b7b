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


proxy_cpu = []
path_cpu = {"direct": [], "proxy": []}  # curl + the server, per download


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def download(via_proxy):
    before = cpu_s(proxy.pid)
    before_path = children_cpu() + cpu_s(server_pid)
    argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{time_total}",
            "http://allowed.test/big/%d" % size]
    if via_proxy:
        argv[1:1] = ["-x", "http://127.0.0.1:3128"]
    else:
        argv[1:1] = ["--noproxy", "*"]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    assert int(out[0]) == size, out
    if via_proxy:
        proxy_cpu.append(cpu_s(proxy.pid) - before)
    path_cpu["proxy" if via_proxy else "direct"].append(children_cpu() + cpu_s(server_pid) - before_path)
    return float(out[1])


result = {"connect_direct_ms": [], "connect_proxy_ms": [], "download_direct_s": [], "download_proxy_s": []}
for i in range(50):  # warm-up: caches, the server's threads
    direct_connect(); proxy_connect()
for i in range(connects):
    result["connect_direct_ms"].append(direct_connect() * 1000)
    result["connect_proxy_ms"].append(proxy_connect() * 1000)
for i in range(rounds):
    if i % 2 == 0:
        result["download_direct_s"].append(download(False))
        result["download_proxy_s"].append(download(True))
    else:
        result["download_proxy_s"].append(download(True))
        result["download_direct_s"].append(download(False))
ours.close()
proxy.wait(timeout=10)
med = {k: statistics.median(v) for k, v in result.items()}
summary = {
    "medians": med,
    "added_connect_ms": med["connect_proxy_ms"] - med["connect_direct_ms"],
    "throughput_direct_MiBps": size / med["download_direct_s"] / 2**20,
    "throughput_proxy_MiBps": size / med["download_proxy_s"] / 2**20,
    "throughput_ratio": med["download_direct_s"] / med["download_proxy_s"],
    "records": sum(1 for _ in open(log)),
    "proxy_cpu_s_per_GiB": statistics.median(proxy_cpu) * (1 << 30) / size,
    "curl_and_server_cpu_s_per_GiB_direct": statistics.median(path_cpu["direct"]) * (1 << 30) / size,
    "curl_and_server_cpu_s_per_GiB_via_proxy": statistics.median(path_cpu["proxy"]) * (1 << 30) / size,
    "samples": result,
}
os.unlink(log)
print(json.dumps(summary))
