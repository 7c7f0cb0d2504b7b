#!/usr/bin/env python3
"""The crash matrix on machine-local, for the receiver's failpoints (issue 17 point 3;
docs/reliability.md §3).

machine-local starts the receiver in its guest with a clean environment; in a failpoint build
the core passes the receiver entries of its own MCP_RELAY_FAILPOINTS in the environment of the
receiver commands it runs (core/src/guestio/exec.c), so the receiver's points fire in a real
machine-local guest too. For every `receiver.*` point of guest/receiver/failpoint.c, and every
`run.resident.*` point of the relay (the resident channel of spec/guest.md §17, which the fake
backend's transport does not offer), one
guest's life (acquire, stage, two runs, finish) runs with MCP_RELAY_FAILPOINTS=<point>=crash;
the receiver ends with _exit(86) there and the call's answer names the failpoint; the relay is
then killed, another starts with the same session and no failpoint, takes the guest back
(machine-local guests outlive their relay), and the life goes on to a delivered package.
Counted, per point, as on the shim over reference-machine (test_crash_matrix.py), and asserted zero: runs
executed twice, evidence lost, leases left (the store's lease folders and registry rows after
the finish), packages that do not verify.

The guest's files are read through the restarted relay (a diagnostic script), not from this
host. Needs root, user namespaces and machine-local.so; skips in a build without failpoints.
RELAY_CRASH_POINTS=<name>,<name> runs only those points.
"""

import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from delivery_support import DeliveryEnv, structured  # noqa: E402
from runs_support import diag  # noqa: E402
from test_crash_matrix import CRASH_EXIT, Life, catalogue, failpoints_built, prepare_project, run_life  # noqa: E402

LOCAL_STEPS = ("acquire", "stage", "run1", "run2", "finish")
LOCAL_OPTIONS = {"display": "off", "maxGuests": 2}


class LocalLife(Life):
    """The life on machine-local: no declared outputs, the guest read through the relay."""

    acquire_args = {"task": "matrix", "image": "local", "extractions": []}

    def hit(self, res):
        """`receiver serve` itself ending at its point leaves the run's channel broken after the
        send (spec/guest.md §17 item 4): the answer says so; a worker's crash names the point."""
        if self.point.startswith("receiver.serve.") and "the channel to receiver serve broke" in json.dumps(res):
            return True
        return Life.hit(self, res)

    def look_at_guest(self, r, step):
        """Before the finish (which ends the guest): its count file and its receipts."""
        if step != "finish" or not self.got or not self.guest:
            return
        root = self.got["guestRoot"]
        s = diag(r, self.guest, 'cat count.txt 2>/dev/null; echo "--receipts--"; '
                 'cd "%s/state/receiver/receipts" 2>/dev/null && find . -type f -exec sha256sum {} +'
                 % root)
        out = s["output"] if isinstance(s.get("output"), str) else ""
        tokens, _sep, receipts = out.partition("--receipts--")
        self.tokens_seen = tokens.split()
        for line in receipts.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2:
                self.guest_receipts[parts[1].lstrip("./")] = parts[0]

    def leases_left(self, env):
        """Lease folders machine-local's store still holds."""
        return [p for p in glob.glob(os.path.join(env.state_dir, "**", "leases", "*"), recursive=True)
                if os.path.isdir(p)]


def local_env(binary):
    if os.geteuid() != 0:
        skip("machine-local guests need the relay to run as root here")
    env = DeliveryEnv(binary, local=True)  # skips where machine-local cannot run
    env.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(LOCAL_OPTIONS)
    return env


def test_receiver_crash_matrix_local(binary):
    """Every receiver failpoint set to crash in a machine-local guest: nothing replayed, lost,
    left or unverified."""
    if not failpoints_built(binary):
        skip("this build has no failpoints (configure with -DRELAY_FAILPOINTS=ON, as scripts/test does)")
    only = [p for p in os.environ.get("RELAY_CRASH_POINTS", "").split(",") if p]
    # the receiver's points, and the relay's on the resident channel (spec/guest.md §17), which only a
    # transport with the stream trait reaches (the shim over reference-machine has none)
    points = [p for p, _e in catalogue() if (p.startswith("receiver.") or p.startswith("run.resident."))
              and (not only or p in only)]
    assert len(points) >= 9 or only, points
    rows, bad = [], []
    for point in points:
        env = local_env(binary)
        t0 = time.monotonic()
        try:
            prepare_project(env)
            life, stats = run_life(env, point, "crash", make_life=LocalLife, steps=LOCAL_STEPS)
        finally:
            env.cleanup()
        rows.append(stats)
        print("  %-34s crash in %-8s runs %d  replayed %d  lost %d  leases %d  unverified %d  (%.1f s)"
              % (point, life.crashed_at, stats["executed"], stats["replayed"], stats["lost"],
                 stats["leases"], stats["unverified"], time.monotonic() - t0), flush=True)
        if stats["replayed"] or stats["lost"] or stats["leases"] or stats["unverified"]:
            bad.append((point, stats))
            print("    lost: %r; leases left: %r" % (stats["lost_files"], stats["leases_left"]), flush=True)
        # every run of the life ran once: the one the receiver died in may not have run at all
        assert stats["executed"] >= 1, (point, stats)
    total = {k: sum(s[k] for s in rows) for k in ("replayed", "lost", "leases", "unverified")}
    print("local receiver crash matrix: %d failpoints, %d replayed, %d lost, %d leases left, %d unverified"
          % (len(rows), total["replayed"], total["lost"], total["leases"], total["unverified"]), flush=True)
    assert not bad, "the local receiver crash matrix is not all zero: %r" % (bad,)


# -- a lease that lapses with no relay (docs/reliability.md §3, "Leases after a TTL") --------

LAPSE_POINT = "run.before-receipt"
LAPSE_TTL_HOURS = 0.1  # the schema's minimum (spec/tools.md): 6 minutes
LAPSE_OPTIONS = {"display": "off", "maxGuests": 2, "graceMs": 0, "backstopMs": 0, "reaperIntervalMs": 100}


def lease_records(env):
    out = []
    for p in glob.glob(os.path.join(env.state_dir, "**", "leases", "*", "lease.json"), recursive=True):
        with open(p) as f:
            out.append(json.load(f))
    return out


def proc_stat(pid):
    """(state, start time) of a process, or None when there is none."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def guest_processes(records):
    """Processes of the guests of `records` still on this host: the init and helper (same pid and
    start time, not a zombie) and anything in a guest's pid namespace. (Not by uid: guests of
    other stores on this host may have the same uids.)"""
    namespaces, found = set(), []
    for rec in records:
        ns = (rec.get("namespaces") or {}).get("pid")
        if isinstance(ns, int) and ns > 0:
            namespaces.add(ns)
        for name, p in (rec.get("pids") or {}).items():
            if isinstance(p, dict) and isinstance(p.get("pid"), int) and p["pid"] > 0:
                st = proc_stat(p["pid"])
                if st and st[0] != "Z" and st[1] == p.get("startTime"):
                    found.append("%s %d" % (name, p["pid"]))
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ns = int(os.readlink("/proc/%s/ns/pid" % d).split("[", 1)[1].rstrip("]"))
        except (OSError, IndexError, ValueError):
            continue
        st = proc_stat(int(d))
        if ns in namespaces and st and st[0] != "Z":
            found.append("pid %s in the guest's pid namespace" % d)
    return sorted(set(found))


def test_lease_lapses_without_a_relay(binary):
    """The relay dies at a failpoint mid-run and no relay comes back for its session: the guest's
    own backstop stops it once the lease's TTL has passed, and the next relay on the store (another
    session) reaps the expired lease of the dead relay. Leases and guest processes left: zero.
    It waits the shortest TTL the contract allows (ttlHours 0.1, 6 minutes) with graceMs and
    backstopMs 0, so it runs only with RELAY_LEASE_LAPSE=1."""
    if not failpoints_built(binary):
        skip("this build has no failpoints (configure with -DRELAY_FAILPOINTS=ON, as scripts/test does)")
    if os.environ.get("RELAY_LEASE_LAPSE") != "1":
        skip("waits the shortest lease TTL (ttlHours 0.1 = 6 minutes): RELAY_LEASE_LAPSE=1 runs it")
    if os.geteuid() != 0:
        skip("machine-local guests need the relay to run as root here")
    env = DeliveryEnv(binary, local=True)
    env.extra_env["MCP_RELAY_LOCAL_OPTIONS"] = json.dumps(LAPSE_OPTIONS)
    t0 = time.monotonic()
    try:
        prepare_project(env)
        r = env.relay(MCP_RELAY_FAILPOINTS="%s=crash" % LAPSE_POINT)
        r.initialize()
        try:
            res = r.call_tool("relay_acquire", {"task": "lapse", "image": "local", "extractions": [],
                                                "ttlHours": LAPSE_TTL_HOURS}, timeout=120)
            assert not res["isError"], res
            guest = structured(res)["guest"]
            res = r.call_tool("relay_stage", {"guest": guest, "workspace": "ws"}, timeout=300)
            assert not res["isError"], res
            try:
                r.call_tool("relay_script", {"guest": guest, "language": "shell", "inline": True,
                                             "code": "echo lapse >> count.txt"}, timeout=120)
            except Exception:  # noqa: BLE001 (the relay dies under the call)
                pass
            r.proc.wait(timeout=30)
            assert r.proc.returncode == CRASH_EXIT, (r.proc.returncode, r.stderr_text()[-3000:])
        finally:
            r.close()
        records = lease_records(env)
        assert len(records) == 1, records
        held = guest_processes(records)
        assert held, "the guest was not running after its relay died: %r" % records
        lapse_at_ms = records[0]["expiresAtMs"]
        print("  relay died at %s; guest processes %d; lease expires in %.0f s"
              % (LAPSE_POINT, len(held), lapse_at_ms / 1000 - time.time()), flush=True)
        # No relay at all: the guest's init stops it once expiresAtMs + grace + backstop passed.
        deadline = lapse_at_ms / 1000 + 60
        while guest_processes(records) and time.time() < deadline:
            time.sleep(1)
        left = guest_processes(records)
        lapsed_after = time.monotonic() - t0
        # The next relay on the store, of another session, reaps the dead relay's expired lease.
        r2 = env.relay(MCP_RELAY_SESSION="lapse-other")
        r2.initialize()
        try:
            # A call that starts the backend (its start-up scan), then its reaper's next looks.
            res = r2.call_tool("relay_probe", {"scope": "host"}, timeout=60)
            assert not res["isError"], res
            until = time.monotonic() + 30
            while True:
                leases = [rec["vm"] for rec in lease_records(env)]
                folders = [p for p in glob.glob(os.path.join(env.state_dir, "**", "leases", "*"),
                                                recursive=True) if os.path.isdir(p)]
                if not (leases or folders) or time.monotonic() > until:
                    break
                time.sleep(0.5)
        finally:
            r2.close()
        print("lease lapse: relay killed at %s, not restarted; after %.0f s: %d guest processes, "
              "%d leases, %d lease folders left" % (LAPSE_POINT, lapsed_after, len(left), len(leases),
                                                     len(folders)), flush=True)
        assert not left, "guest processes left after the lease lapsed: %r" % left
        assert not leases and not folders, "leases left after the lapse: %r %r" % (leases, folders)
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
