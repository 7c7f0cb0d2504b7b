#!/usr/bin/env python3
"""Bounded machine-local guests without cgroup v2 (issue 17 point 5, docs/machine-local.md,
"Bounds"): every guest runs as a uid of its own from options.guestUser's range, and every guest
command gets RLIMIT_NPROC (on that uid), RLIMIT_DATA and RLIMIT_FSIZE; where the host's v1 pids
and memory hierarchies are writable, the guest also gets v1 cgroups with pids.max and
memory.limit_in_bytes. Through the real binary and real guests:

  - the host probe and the lease say which bounds a guest gets;
  - two guests run as two different uids of the range; the claims live in the store and the
    released guest's claim is gone;
  - in guest A a memory hog (1 GiB in one process) fails with MemoryError while 16 MiB work; a
    2 MiB write stops at the 1 MiB file bound (SIGXFSZ); where the v1 memory cgroup exists,
    four processes of 200 MiB each (each under the rlimit) do not all survive its 512 MiB;
  - in guest A a fork bomb (background processes until fork fails) is stopped at the process
    bound, while the host still forks and guest B's recorded relay_script succeeds, during the
    bomb and after it; the bomb's cgroup (v1 pids, where it exists) stays within pids.max.

Also as an ordinary user (issue 21): the guest uids are then subordinate ids of the user's
and no cgroup is writable on this project's machines, so the rlimits are the bounds.
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import diag, make_variant, run, stage, structured, text_of  # noqa: E402

MIB = 1 << 20
OPTIONS = {
    "display": "off",
    "maxGuests": 3,
    "bounds": {"processes": 48, "dataBytes": 256 * MIB, "fileBytes": 1 * MIB},
    "limits": {"pids": 96, "memoryBytes": 512 * MIB},
}


def local_variant(binary):
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(OPTIONS)
    return v


def out_of(s):
    return s["output"] if isinstance(s.get("output"), str) else json.dumps(s.get("output"))


def shell(r, guest, code, timeout_ms=60000):
    s = diag(r, guest, code, timeout_ms=timeout_ms)
    return s, out_of(s)


def claims(state_dir):
    """{uid: vm} of every guest uid claim in the store (<stateDir>/uids/<uid> -> vm)."""
    found = {}
    for link in glob.glob(os.path.join(state_dir, "**", "uids", "[0-9]*"), recursive=True):
        found[int(os.path.basename(link))] = os.readlink(link)
    return found


def recorded_ok(r, guest, marker):
    res = run(r, guest, "echo %s; id -u" % marker, timeout=120)
    assert res["isError"] is False, text_of(res)
    s = structured(res)
    assert s["outcome"]["exitStatus"]["code"] == 0, s["outcome"]
    return s


def check_probe(r):
    res = r.call_tool("relay_probe", {"scope": "host"}, timeout=60)
    assert res["isError"] is False, text_of(res)
    cap = structured(res)["backend"]["capacity"]
    b = cap["bounds"]
    assert b["processes"] == 48 and b["dataBytes"] == 256 * MIB and b["fileBytes"] == MIB, b
    assert b["guestUids"] == {"first": 61000, "count": 64}, b
    v1 = cap["cgroups"]["v1"]
    if v1["pids"]:
        assert b["cgroupPids"] == {"version": 1, "max": 96}, b
    if v1["memory"]:
        assert b["cgroupMemory"] == {"version": 1, "maxBytes": 512 * MIB}, b
    print("  this host: v1 pids %s, v1 memory %s, v2 controllers %s" % (
        v1["pids"] or "none", v1["memory"] or "none",
        {k: cap["cgroups"][k] for k in ("memory", "pids", "cpu")}), flush=True)
    return cap


def memory_and_file_bounds(r, guest, cap):
    s, out = shell(r, guest, "python3 -c 'b = bytearray(16 << 20); print(\"small\", len(b))'; "
                             "python3 -c 'b = bytearray(1 << 30)' 2>&1 | tail -1; echo hog=$?")
    assert "small 16777216" in out and "MemoryError" in out, out
    s, out = shell(r, guest, "head -c 2097152 /dev/zero > /tmp/big; echo status=$?; stat -c size=%s /tmp/big")
    assert "status=153" in out and "size=1048576" in out, out  # 128 + SIGXFSZ, cut at the bound
    if cap["cgroups"]["v1"]["memory"] is None:
        print("  no writable v1 memory hierarchy: the cgroup memory bound is not tried", flush=True)
        return
    code = ("for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(200 << 20); time.sleep(3)' & done; "
            "ok=0; for j in 1 2 3 4; do wait %$j && ok=$((ok+1)); done; echo survived=$ok")
    s, out = shell(r, guest, code)
    survived = int(out.split("survived=")[1].split()[0])
    assert survived < 4, out  # 800 MiB do not fit in the guest's 512 MiB


def fork_bomb(r, guest):
    """Starts background sleeps until fork fails; returns how many started."""
    code = ("sh -c 'n=0; while [ $n -lt 1000 ]; do sleep 120 </dev/null >/dev/null 2>&1 & n=$((n+1)); "
            "echo $n > /tmp/forks; done' 2>/tmp/bomb.err; echo status=$?; read n < /tmp/forks; "
            "echo forks=$n; read e < /tmp/bomb.err; echo \"err=$e\"")
    s, out = shell(r, guest, code, timeout_ms=120000)
    assert "status=2" in out and "fork" in out.lower(), out
    forks = int(out.split("forks=")[1].split()[0])
    assert 0 < forks < 48, out
    return forks


def pids_cgroup_within(vm):
    for d in glob.glob("/sys/fs/cgroup/pids/**/mcp-relay-local/%s" % vm, recursive=True):
        with open(os.path.join(d, "pids.max")) as f:
            assert f.read().strip() == "96", d
        with open(os.path.join(d, "pids.current")) as f:
            current = int(f.read())
        assert 40 <= current <= 96, (d, current)  # the bomb is in it, and within the bound
        return current
    return None


def test_bounded_guests(binary):
    v = local_variant(binary)
    try:
        with v.relay() as r:
            r.initialize()
            cap = check_probe(r)
            a = v.acquire(r)["guest"]
            b = v.acquire(r)["guest"]
            _, out_a = shell(r, a, "id -u; id -g; ulimit -p; ulimit -d; ulimit -f")
            _, out_b = shell(r, b, "id -u")
            uid_a, uid_b = int(out_a.split()[0]), int(out_b.split()[0])
            assert uid_a != uid_b and 61000 <= uid_a < 61064 and 61000 <= uid_b < 61064, (out_a, out_b)
            # dash: ulimit -p processes, -d KiB
            assert out_a.split()[2] == "48" and out_a.split()[3] == str(256 * 1024), out_a
            held = claims(v.state_dir)
            assert set(held) == {uid_a, uid_b}, held
            assert held[uid_a].startswith("local-%s-" % a) and held[uid_b].startswith("local-%s-" % b), held

            res = stage(r, b)
            assert res["isError"] is False, text_of(res)
            memory_and_file_bounds(r, a, cap)
            forks = fork_bomb(r, a)
            print("  the fork bomb was stopped after %d processes" % forks, flush=True)
            current = pids_cgroup_within(held[uid_a])
            if current is not None:
                print("  guest A's v1 pids cgroup holds %d of its 96" % current, flush=True)
            # The bomb is alive (its sleeps run for two minutes): the host and guest B work.
            assert subprocess.run(["sh", "-c", "true & wait"], timeout=30).returncode == 0
            s = recorded_ok(r, b, "during-the-bomb")
            assert s["stdout"] == "during-the-bomb\n%d\n" % uid_b, s

            res = r.call_tool("relay_release", {"guest": a}, timeout=120)
            assert res["isError"] is False, text_of(res)
            held = claims(v.state_dir)
            assert set(held) == {uid_b}, held  # a's uid was given back
            s = recorded_ok(r, b, "after-the-bomb")
            assert s["stdout"] == "after-the-bomb\n%d\n" % uid_b, s
            c = v.acquire(r)["guest"]
            _, out_c = shell(r, c, "id -u")
            assert int(out_c.split()[0]) != uid_b, out_c
            for g in (b, c):
                res = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert res["isError"] is False, text_of(res)
            assert claims(v.state_dir) == {}, claims(v.state_dir)
    finally:
        v.cleanup()


def test_bad_bounds_are_refused_by_name(binary):
    v = local_variant(binary)
    try:
        for bad, says in (({"bounds": {"processes": 3}}, "options.bounds.processes must be"),
                          ({"bounds": {"dataBytes": "1G"}}, "options.bounds.dataBytes must be"),
                          ({"bounds": {"cpu": 1}}, "options.bounds.cpu is unknown"),
                          ({"guestUser": {"name": "relay", "uid": 65500, "count": 64}}, "within 65535")):
            v.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(bad)
            with v.relay() as r:
                r.initialize()
                res = r.call_tool("relay_acquire", {"task": "bad", "image": "local", "extractions": []},
                                  timeout=120)
                text = text_of(res)
                assert res["isError"] is True and structured(res)["error"]["code"] == "backend-unavailable", text
                assert says in text and "MCP_RELAY_LOCAL_OPTIONS" in text, (bad, text)
    finally:
        v.cleanup()


if __name__ == "__main__":
    run_tests(globals())
