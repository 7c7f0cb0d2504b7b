#!/usr/bin/env python3
"""The fault matrix (issue 17 point 4; docs/reliability.md §4): faults of the host's
surroundings and of a lying guest, each refused or retried as the specs say, the guest kept,
nothing replayed and nothing written outside the evidence folder.

  test_service_faults          the machine service (machine-service-standin, real HTTP) down,
                               slow, answering 500 and dropping the connection (before and
                               after doing the request), at acquire,
                               push (stage), exec (run), pull (finish) and release; each failed
                               call is made once more and the session ends in a verified package
                               with every run executed at most once and no machine left
  test_ssh_dropped_mid_push_and_mid_pull
                               transfer-ssh to a real sshd on 127.0.0.1 (leases of the fault
                               shim over reference-machine):
                               every connection of the sshd is killed while a 96 MiB file is
                               part-way written in the guest (relay_stage) and on the host
                               (relay_extract); each call succeeds or fails keeping the guest
                               and succeeds when made again, and the copies are whole
  test_guest_disk_full_during_stage
                               the guest's disk (a 1 MiB tmpfs over the guest's workspace)
                               too small for the workspace: relay_stage fails, the guest is
                               kept, and once the disk is larger the same stage succeeds
  test_sparse_2gib_output_and_state
                               a 2 GiB sparse file as an output and in the guest's state, the
                               evidence volume a 64 MiB tmpfs: space-shortfall before a byte is
                               pulled, the guest kept, then finished without it
  test_receiver_replaced_with_garbage
                               the guest overwrites its receiver with garbage: the run is not
                               counted as run and never replayed, relay_finish fails keeping the
                               guest; a restored receiver lets the same guest finish
  test_state_replaced_with_links
                               the guest replaces its journal with a link to a host file and
                               plants a link to a host folder in its state: the package never
                               follows them, the host files are unchanged, nothing is written
                               outside the evidence folder

The lying guests of the step download (tars with `..`, absolute paths, links, devices, FIFOs,
oversize entries, hashes that differ from the receipt, forged receipt paths, truncated
archives) are test_delivery_hostile.py's; the PNG bomb (a header that declares a huge image)
and outputs over the size limit (a sparse file) are test_images_application.py's; the full
evidence volume is test_delivery_space.py's; a 500 and a dropped connection at acquire are also
test_service_capacity.py's. docs/reliability.md §4 lists them all.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from service_support import Standin, text  # noqa: E402
from delivery_support import DeliveryEnv, files_under, structured, text_of  # noqa: E402

def run_code(token):
    return 'mkdir -p out; echo %s >> out/count.txt; echo %s' % (token, token)


def review_ok(binary, folder):
    return subprocess.run([binary, "review", folder], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def counted(evidence):
    """The run tokens in the finished package's extracted count file."""
    found = []
    for path in files_under(os.path.join(evidence, "extractions")):
        if path.endswith("count.txt"):
            with open(os.path.join(evidence, "extractions", path)) as f:
                found = f.read().split()
    return found


# -- the machine service -------------------------------------------------------------------

ROUTE_STEP = {"acquire": "acquire", "push": "stage", "exec": "run", "pull": "finish",
              "release": "finish"}
# "-after": the service does the request, then answers 500 or drops the connection (an
# indeterminate outcome: the request took effect and the relay cannot know it).
KINDS = {"500": {"status": 500}, "drop": {"dropConnection": True}, "slow": {"delayMs": 3000},
         "500-after": {"status": 500, "phase": "after"},
         "drop-after": {"dropConnection": True, "phase": "after"}}


def service_session(binary, svc, route, kind):
    """One session with one fault at `route`; returns a one-line outcome."""
    outcome = []
    earlier = len(svc.requests("POST"))  # the stand-in's log holds the earlier sessions too
    with svc.relay(binary) as r:
        r.initialize()
        os.makedirs(os.path.join(r.project, "ws"), exist_ok=True)
        with open(os.path.join(r.project, "ws", "input.txt"), "w") as f:
            f.write("input\n")
        guest = [None]
        evidence = [None]
        tokens = []

        def step(name):
            if name == "acquire":
                res = r.call_tool("relay_acquire", {"task": "faults", "image": "ubuntu2404",
                                                    "extractions": [{"name": "count",
                                                                     "path": "out/count.txt"}]},
                                  timeout=240)
                if not res["isError"]:
                    guest[0] = structured(res)["guest"]
                    evidence[0] = structured(res)["evidencePath"]
                return res
            if name == "stage":
                return r.call_tool("relay_stage", {"guest": guest[0], "workspace": "ws"}, timeout=300)
            if name == "run":
                tokens.append("t%d" % len(tokens))
                return r.call_tool("relay_script", {"guest": guest[0], "language": "shell",
                                                    "inline": True, "code": run_code(tokens[-1])},
                                   timeout=300)
            return r.call_tool("relay_finish", {"guest": guest[0]}, timeout=300)

        for name in ("acquire", "stage", "run", "run", "finish"):
            injected = ROUTE_STEP[route] == name and not outcome
            if injected:
                spec = {"route": route, "times": 1}
                spec.update(KINDS[kind])
                svc.fault(spec)
            res = step(name)
            failed = res["isError"] or (name == "run" and structured(res).get("outcome", {}).get("kind")
                                        not in ("completed",))
            if injected:
                outcome.append("%s %s" % (name, "failed: " + text(res).split("\n")[0][:90] if failed
                                          else "succeeded"))
            if failed:
                assert injected, "step %s failed without a fault: %s" % (name, text(res)[:2000])
                svc.fault({"clear": True})
                if name == "acquire":
                    # An unknown outcome is settled by relay_release; then a new acquisition.
                    s = structured(r.call_tool("relay_status"))
                    for g in s["guests"]:
                        rel = r.call_tool("relay_release", {"guest": g["guest"]}, timeout=240)
                        assert not rel["isError"], text(rel)
                    res = step(name)
                elif name == "run":
                    continue  # a run is never sent again; the next run is a new execution
                else:
                    s = structured(r.call_tool("relay_status"))
                    assert any(g["guest"] == guest[0] for g in s["guests"]), (
                        "the guest was not kept after %s failed" % name)
                    res = step(name)
                assert not res["isError"], "the second %s failed: %s" % (name, text(res)[:2000])
        fin = structured(res)
        assert fin.get("delivered") is True, fin
        ran = counted(evidence[0])
        assert len(ran) == len(set(ran)), "a run executed twice: %r" % ran
        assert set(ran) <= set(tokens), (ran, tokens)
        assert review_ok(binary, evidence[0]), "the package does not verify"
        left = svc.machines()
        assert not left, "machines left at the service: %r" % left
        seen = [e for e in svc.requests("POST")[earlier:]
                if e["path"] == "/" + route or e["path"].endswith("/" + route)]
        outcome.append("runs %d of %d; %d %s requests" % (len(ran), len(tokens), len(seen), route))
    return "; ".join(outcome)


def test_service_faults(binary):
    svc = Standin(binary)
    try:
        for route in ROUTE_STEP:
            for kind in KINDS:
                t0 = time.monotonic()
                line = service_session(binary, svc, route, kind)
                print("  %-8s %-10s %s (%.1f s)" % (route, kind, line, time.monotonic() - t0), flush=True)
        # Down: nothing answers at the service's address.
        url = svc.url
        svc.stop()
        with svc.relay(binary, MCP_RELAY_URL=url) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "down", "image": "ubuntu2404", "extractions": []},
                              timeout=240)
            assert res["isError"], text(res)
            code = structured(res)["error"]["code"]
            assert code == "backend-unavailable", (code, text(res))
            s = structured(r.call_tool("relay_status"))
            assert s["guests"] == [], s
            print("  service  down  acquire refused: %s" % text(res).split("\n")[0][:100], flush=True)
    finally:
        svc.cleanup()


# -- SSH dropped mid-push and mid-pull -------------------------------------------------------

def sshd_sessions(v):
    """The per-connection sshd processes of the test's own sshd (children of its listener)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == v.sshd.pid:
            out.append(int(pid))
    return out


def partial_file(folders, full_size):
    """A regular file below `folders` that is being written (more than 1 MiB, not yet whole)."""
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                try:
                    size = os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
                if (1 << 20) < size < full_size:
                    return os.path.join(dirpath, name), size
    return None


class DropWhenPartial(threading.Thread):
    """Kills the sshd's connections once a file below `folders` is part-way written."""

    def __init__(self, v, folders, full_size):
        super().__init__(daemon=True)
        self.v, self.folders, self.full_size = v, folders, full_size
        self.dropped = None
        self.killed = []
        self.stop = False

    def run(self):
        deadline = time.monotonic() + 120
        while not self.stop and time.monotonic() < deadline:
            seen = partial_file(self.folders, self.full_size)
            if seen:
                self.killed = sshd_sessions(self.v)
                for pid in self.killed:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                self.dropped = seen
                return
            time.sleep(0.001)


def dropped_call(v, r, folders, big, tool, args):
    """Calls `tool`, dropping every ssh connection once a file below `folders` is part-way
    written; a failure must keep the guest and the same call made again must succeed."""
    drop = DropWhenPartial(v, folders, big)
    drop.start()
    res = r.call_tool(tool, args, timeout=600)
    drop.stop = True
    drop.join()
    assert drop.dropped and drop.killed, "%s ended before a part-written file was seen" % tool
    print("  %s: %d ssh connections dropped at %s (%d bytes); %s" % (
        tool, len(drop.killed), os.path.basename(drop.dropped[0]), drop.dropped[1],
        ("error " + structured(res)["error"]["code"]) if res["isError"] else "succeeded"), flush=True)
    if res["isError"]:
        assert structured(res)["error"]["code"] == "transfer-failed", text_of(res)
        s = structured(r.call_tool("relay_status"))
        assert any(g["guest"] == args["guest"] for g in s["guests"]), "the guest was not kept"
        res = r.call_tool(tool, args, timeout=600)
        assert not res["isError"], "the second %s: %s" % (tool, text_of(res))


def test_ssh_dropped_mid_push_and_mid_pull(binary):
    import runs_support
    v, why = runs_support.make_variant(binary, "ssh")
    if v is None:
        skip(why)
    big = 96 << 20
    try:
        ws = os.path.join(v.project, "ws")
        os.makedirs(ws)
        data = os.urandom(big)
        with open(os.path.join(ws, "big.bin"), "wb") as f:
            f.write(data)
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r, extractions=[{"name": "big", "path": "out/big.bin"}])
            name, root, evidence = g["guest"], g["guestRoot"], g["evidencePath"]
            # Mid-push: the guest's copy of the workspace is part-way written.
            dropped_call(v, r, [root], big, "relay_stage", {"guest": name, "workspace": "ws"})
            with open(os.path.join(root, "workspace", "big.bin"), "rb") as f:
                assert f.read() == data, "the staged copy differs"
            res = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True,
                                               "code": "mkdir -p out && cp big.bin out/big.bin"}, timeout=300)
            assert not res["isError"], text_of(res)
            # Mid-pull: the host's copy of the output is part-way written.
            dropped_call(v, r, [v.project, v.state_dir, r.tmpdir], big, "relay_extract",
                         {"guest": name, "names": ["big"]})
            fin = r.call_tool("relay_finish", {"guest": name}, timeout=600)
            assert not fin["isError"], text_of(fin)
        pulled = [p for p in files_under(os.path.join(evidence, "extractions")) if p.endswith("big.bin")]
        assert pulled, files_under(evidence)
        for p in pulled:
            with open(os.path.join(evidence, "extractions", p), "rb") as f:
                assert f.read() == data, "an extracted copy differs: %s" % p
        assert review_ok(binary, evidence)
    finally:
        v.cleanup()


# -- the guest's disk ------------------------------------------------------------------------

def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    rc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", path],
                        stderr=subprocess.PIPE, text=True)
    if rc.returncode != 0:
        skip("cannot mount a tmpfs (%s)" % rc.stderr.strip())


def umount(path):
    subprocess.run(["umount", "-l", path], stderr=subprocess.DEVNULL)


def test_guest_disk_full_during_stage(binary):
    if os.geteuid() != 0:
        skip("mounting the guest's small disk needs root")
    env = DeliveryEnv(binary)
    disk = None
    try:
        ws = os.path.join(env.project, "ws")
        os.makedirs(ws)
        with open(os.path.join(ws, "big.bin"), "wb") as f:
            f.write(os.urandom(4 << 20))
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g, root = acq["guest"], acq["guestRoot"]
            disk = os.path.join(root, "workspace")
            mount_tmpfs(disk, "1m")
            res = r.call_tool("relay_stage", {"guest": g, "workspace": "ws"}, timeout=300)
            assert res["isError"], "a 4 MiB workspace was staged on a 1 MiB disk: " + text_of(res)
            code = structured(res)["error"]["code"]
            print("  stage on a full guest disk: %s: %s" % (code, text_of(res).split("\n")[0][:160]))
            assert code in ("transfer-failed", "integrity-failed"), code
            assert env.status_guest(r, g) is not None, "the guest was not kept"
            subprocess.run(["mount", "-o", "remount,size=64m", disk], check=True)
            res = r.call_tool("relay_stage", {"guest": g, "workspace": "ws"}, timeout=300)
            assert not res["isError"], "the stage after the disk grew: " + text_of(res)
            umount(disk)  # the guest's folder is removed at release; a mount would stay
            disk = None
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert not fin["isError"], text_of(fin)
            assert review_ok(binary, acq["evidencePath"])
    finally:
        if disk:
            umount(disk)
        env.cleanup()


# -- a 2 GiB sparse file -----------------------------------------------------------------------

def test_sparse_2gib_output_and_state(binary):
    """A guest's 2 GiB sparse file (a few blocks on its disk) as a declared output and in its
    state, with the evidence volume a 64 MiB tmpfs: the sizes the guest reports count, so
    relay_extract and relay_finish refuse with space-shortfall before pulling a byte, the
    guest is kept, and without the file the same guest finishes on the same volume."""
    if os.geteuid() != 0:
        skip("mounting the small evidence volume needs root")
    volume = tempfile.mkdtemp(prefix="relay-fault-volume-")
    mount_tmpfs(volume, "64m")
    try:
        project = os.path.join(volume, "project")
        os.mkdir(project, 0o700)
        env = DeliveryEnv(binary, project=project)
        try:
            with env.relay() as r:
                r.initialize()
                acq = env.acquire(r, extractions=[{"name": "big", "path": "big.bin"}])
                g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
                env.stage(r, g)
                env.run(r, g, "truncate -s 2G big.bin")
                x = r.call_tool("relay_extract", {"guest": g, "names": ["big"]}, timeout=300)
                assert x["isError"] and structured(x)["error"]["code"] == "space-shortfall", text_of(x)
                print("  relay_extract of 2 GiB sparse: %s" % text_of(x).split("\n")[0][:160])
                assert not os.path.exists(os.path.join(evidence, "extractions", "big"))
                env.diag(r, g, "mv %s/workspace/big.bin %s/state/big.bin" % (root, root))
                fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
                assert fin["isError"] and structured(fin)["error"]["code"] == "space-shortfall", text_of(fin)
                print("  relay_finish with 2 GiB sparse in state: %s" % text_of(fin).split("\n")[0][:160])
                assert not os.path.exists(os.path.join(evidence, "state", "big.bin"))
                assert env.status_guest(r, g) is not None, "the guest was not kept"
                env.diag(r, g, "rm %s/state/big.bin" % root)
                fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
                assert not fin["isError"], text_of(fin)
                assert review_ok(binary, evidence)
        finally:
            env.cleanup()
    finally:
        umount(volume)
        shutil.rmtree(volume, ignore_errors=True)


# -- a guest that breaks its receiver or its state --------------------------------------------

def test_receiver_replaced_with_garbage(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r, extractions=[{"name": "count", "path": "out/count.txt"}])
            g, root = acq["guest"], acq["guestRoot"]
            env.stage(r, g)
            env.run(r, g, run_code("before"))
            env.diag(r, g, "cp %(R)s/receiver %(R)s/.receiver.kept && head -c 4096 /dev/urandom > "
                           "%(R)s/receiver.tmp && chmod 700 %(R)s/receiver.tmp && "
                           "mv %(R)s/receiver.tmp %(R)s/receiver" % {"R": root})
            res = env.run(r, g, run_code("garbage"), expect_ok=False)
            s = structured(res)
            kind = s.get("outcome", {}).get("kind") if not res["isError"] else "error"
            print("  a run through a garbage receiver: %s: %s" % (kind, text_of(res).split("\n")[0][:160]))
            assert kind != "completed", s
            assert env.status_guest(r, g) is not None
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"], "a finish through a garbage receiver: " + text_of(fin)
            print("  relay_finish: %s" % text_of(fin).split("\n")[0][:160])
            assert env.status_guest(r, g) is not None, "the guest was not kept"
            env.diag(r, g, "mv %(R)s/.receiver.kept %(R)s/receiver" % {"R": root})
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert not fin["isError"], text_of(fin)
            ran = counted(acq["evidencePath"])
            assert ran == ["before"], ran  # the garbage run never ran and was never replayed
            assert review_ok(binary, acq["evidencePath"])
    finally:
        env.cleanup()


def test_state_replaced_with_links(binary):
    env = DeliveryEnv(binary)
    canary_dir = tempfile.mkdtemp(prefix="relay-fault-canary-")
    canary = os.path.join(canary_dir, "secret.txt")
    with open(canary, "w") as f:
        f.write("a host file no package may hold\n")
    before = os.stat(canary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g, root, evidence = acq["guest"], acq["guestRoot"], acq["evidencePath"]
            env.stage(r, g)
            env.run(r, g, "echo one")
            env.wait_downloads(r, g, lambda d: d["inFlight"] == 0)
            env.diag(r, g, "set -e; J=%(R)s/state/journal/events.jsonl; mv $J %(R)s/.journal.kept; "
                           "ln -s %(C)s $J; ln -s %(D)s %(R)s/state/records/linked"
                           % {"R": root, "C": canary, "D": canary_dir})
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            print("  relay_finish with linked state: %s" % text_of(fin).split("\n")[0][:200])
            with open(canary) as f:
                assert f.read() == "a host file no package may hold\n"
            assert os.stat(canary).st_mtime == before.st_mtime
            assert os.listdir(canary_dir) == ["secret.txt"], os.listdir(canary_dir)
            for path in files_under(evidence):
                full = os.path.join(evidence, path)
                assert not os.path.islink(full), "a link in the package: %s" % path
                with open(full, "rb") as f:
                    assert b"a host file no package may hold" not in f.read(), path
            outside = [p for p in files_under(env.project)
                       if not p.startswith("relay-evidence/")]
            assert outside == [], outside
            if fin["isError"]:
                assert env.status_guest(r, g) is not None, "the guest was not kept"
                env.diag(r, g, "J=%(R)s/state/journal/events.jsonl; rm -f $J %(R)s/state/records/linked; "
                               "mv %(R)s/.journal.kept $J" % {"R": root})
                fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
                assert not fin["isError"], text_of(fin)
            assert review_ok(binary, evidence)
    finally:
        env.cleanup()
        shutil.rmtree(canary_dir, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
