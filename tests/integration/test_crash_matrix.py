#!/usr/bin/env python3
"""The crash matrix (issue 17 point 3; docs/reliability.md §3).

For every failpoint of the catalogue (core/src/util/failpoint.c and guest/receiver/failpoint.c),
one guest's whole life runs on the fake backend (its guest is this host, so its receiver really
runs and the test sees the guest's files): acquire with two declared outputs, stage a workspace,
two runs, relay_extract, relay_image of an output, relay_finish. The first relay has
MCP_RELAY_FAILPOINTS=<point>=crash: the relay (or the receiver) ends with _exit(86) at that
point (test_error_matrix: <point>=error at every error-capable point: the call fails naming
the failpoint and the guest is kept). The relay is then killed if it still runs, another starts
with the same MCP_RELAY_SESSION and no failpoint, the interrupted call is made again (a run
never is: it is a new execution), and the life goes on to a delivered package. Counted, per
point, and asserted zero:

  replayed   a run token the guest's count file holds more than once (a run executed twice)
  lost       a file of the evidence folder at the moment of the crash (derived files aside)
             whose bytes are nowhere in the delivered package, or a receipt the guest holds
             that the package does not
  leases     leases the backend (the shim over reference-machine) still holds, and registry rows,
             after the finish (and a
             release of anything left)
  unverified `mcp-relay review` of the delivered package does not verify it

The matrix needs a build with -DRELAY_FAILPOINTS=ON (scripts/test's build-test); elsewhere it
skips. RELAY_CRASH_POINTS=<name>,<name> runs only those points. The figures are in
docs/reliability.md §3.
"""

import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from delivery_support import DeliveryEnv, structured, text_of  # noqa: E402
from images_support import png  # noqa: E402
from lifecycle_support import registry_rows  # noqa: E402

CRASH_EXIT = 86
DERIVED = ("manifest.json", "index.html", "OPENING.txt")
DECLARED = [{"name": "shot", "path": "out/shot.png"}, {"name": "outdir", "path": "outdir"}]
STEPS = ("acquire", "stage", "run1", "run2", "extract", "image", "finish")


def source_dir():
    return os.environ.get("RELAY_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")


def catalogue():
    """Every failpoint (name, error-capable), from the two catalogues in the sources."""
    names = []
    for rel in ("core/src/util/failpoint.c", "guest/receiver/failpoint.c"):
        with open(os.path.join(source_dir(), rel)) as f:
            text = f.read()
        table = text[text.index("catalogue[] = {"):text.index("};", text.index("catalogue[] = {"))]
        names += [(n, e in ("true", "1")) for n, e in
                  re.findall(r'\{"([a-z.-]+)",\s*(true|false|0|1)\}', table)]
    return names


def failpoints_built(binary):
    if os.environ.get("RELAY_FAILPOINTS", "").upper() in ("ON", "1", "TRUE", "YES"):
        return True
    with open(binary, "rb") as f:
        return b"MCP_RELAY_FAILPOINTS" in f.read()


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def tree_hashes(root):
    """{relative path: sha256} of the regular files under root (no links followed)."""
    out = {}
    if not os.path.isdir(root):
        return out
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, root)] = sha(p)
    return out


class Life:
    """One guest's life across relays, with what the counts need."""

    acquire_args = {"task": "matrix", "image": "folder", "extractions": DECLARED}

    def hit(self, res):
        """True when the step's answer shows the failpoint fired in the guest."""
        return ("failpoint %s:" % self.point) in json.dumps(res)

    def __init__(self, env, point):
        self.env, self.point = env, point
        self.guest = None
        self.got = None
        self.tokens = 0
        self.crashed_at = None
        self.crash_snapshot = {}
        self.crash_evidence = None
        self.packages = []
        self.guest_roots = []
        self.tokens_seen = []
        self.guest_receipts = {}

    def look_at_guest(self, r, step):
        """The guest's count file and receipts, read before each step (the finish's release
        removes the fake guest's folder). `r`, `step`: the relay and the step about to run
        (a guest not on this host reads through them)."""
        if not self.got:
            return
        root = self.got["guestRoot"]
        try:
            with open(os.path.join(root, "workspace", "count.txt")) as f:
                self.tokens_seen = f.read().split()
        except FileNotFoundError:
            pass
        self.guest_receipts.update(tree_hashes(os.path.join(root, "state", "receiver", "receipts")))

    # -- the steps ---------------------------------------------------------
    def call(self, r, name, args, timeout=240):
        return r.call_tool(name, args, timeout=timeout)

    def step(self, r, name):
        if name == "acquire":
            res = self.call(r, "relay_acquire", self.acquire_args)
            if not res["isError"]:
                self.got = structured(res)
                self.packages.append(self.got["evidencePath"])
                self.guest = self.got["guest"]
                self.guest_roots.append(self.got["guestRoot"])
            return res
        if name == "stage":
            return self.call(r, "relay_stage", {"guest": self.guest, "workspace": "ws"})
        if name in ("run1", "run2"):
            self.tokens += 1
            token = "token-%s-%d" % (name, self.tokens)
            code = ('mkdir -p out outdir; echo %s >> count.txt; echo %s > outdir/%s.txt; echo %s'
                    % (token, token, token, token))
            return self.call(r, "relay_script", {"guest": self.guest, "language": "shell",
                                                 "inline": True, "code": code})
        if name == "extract":
            return self.call(r, "relay_extract", {"guest": self.guest, "names": ["outdir"]})
        if name == "image":
            ws = os.path.join(self.got["guestRoot"], "workspace", "out")
            os.makedirs(ws, exist_ok=True)
            with open(os.path.join(ws, "shot.png"), "wb") as f:
                f.write(png(64, 48, seed=3))
            return self.call(r, "relay_image", {"guest": self.guest,
                                                "target": {"source": "application", "name": "shot"}})
        if name == "finish":
            return self.call(r, "relay_finish", {"guest": self.guest}, timeout=300)
        raise AssertionError(name)

    def leases_left(self, env):
        """Leases the backend still holds (reference-machine's lease files, under the shim)."""
        return sorted(env.lease_files())

    def snapshot(self):
        if self.got:
            self.crash_evidence = self.got["evidencePath"]
            self.crash_snapshot = tree_hashes(self.crash_evidence)


def wait_settled(r, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        s = structured(r.call_tool("relay_status"))
        if all(g["phase"] != "reconciling" for g in s["guests"]):
            return s
        if time.monotonic() > deadline:
            raise AssertionError("guests stayed reconciling: %s" % json.dumps(s)[:2000])
        time.sleep(0.1)


def guest_status(s, name):
    for g in s["guests"]:
        if g["guest"] == name:
            return g
    return None


def recover(life, r, steps=STEPS):
    """After the restart: where the life goes on from. Returns the index of the step to do."""
    s = wait_settled(r)
    g = guest_status(s, life.guest) if life.guest else None
    if g is None and life.got and os.path.exists(os.path.join(life.got["evidencePath"], "manifest.json")):
        return len(steps)  # the crash came after the package was delivered: the life is over
    if g is None or g["phase"] in ("acquisition-uncertain", "acquiring", "not-acquired"):
        if g is not None:  # settle an uncertain acquisition, then acquire afresh
            res = r.call_tool("relay_release", {"guest": life.guest}, timeout=240)
            assert not res["isError"], "release of the uncertain guest: " + text_of(res)
        elif life.guest is None:
            # Crashed before the acquisition answered: anything held under the task's guest?
            for h in s["guests"]:
                res = r.call_tool("relay_release", {"guest": h["guest"]}, timeout=240)
                assert not res["isError"], "release of %s: %s" % (h["guest"], text_of(res))
        life.guest = None
        return steps.index("acquire")
    return None



def run_life(env, point, action="crash", make_life=Life, steps=STEPS):
    """Runs the life of `steps` with `point` set to `action`; returns (life, stats)."""
    life = make_life(env, point)
    fp_env = {"MCP_RELAY_FAILPOINTS": "%s=%s" % (point, action)}
    reached = False
    i = 0
    r = env.relay(**fp_env)
    r.initialize()
    restarted = False
    try:
        while i < len(steps):
            name = steps[i]
            life.look_at_guest(r, name)
            failure = None
            try:
                res = life.step(r, name)
            except Exception as e:  # noqa: BLE001 (the relay died under the call)
                res, failure = None, e
                try:
                    r.proc.wait(timeout=10)  # stdout closes a moment before the exit is seen
                except subprocess.TimeoutExpired:
                    pass
            died = r.proc.poll() is not None
            receiver_hit = res is not None and life.hit(res)
            if died or receiver_hit:
                assert not restarted, "a second crash at %s in step %s" % (point, name)
                if action == "error":
                    # The operation failed as its step's write would have: the relay answers,
                    # names the failpoint, and keeps the guest.
                    assert not died, "the relay died at an error failpoint %s:\n%s" % (
                        point, r.stderr_text()[-3000:])
                    assert ("failpoint %s: injected error" % point) in json.dumps(res), text_of(res)
                    if life.guest:
                        assert guest_status(structured(r.call_tool("relay_status")), life.guest), (
                            "the guest was not kept after the error at %s" % point)
                if died:
                    assert r.proc.returncode == CRASH_EXIT, (
                        "the relay ended with %s, not the failpoint's %d, in step %s:\n%s"
                        % (r.proc.returncode, CRASH_EXIT, name, r.stderr_text()[-3000:]))
                    assert ("failpoint %s: crash" % point) in r.stderr_text()
                reached = True
                life.crashed_at = name
                life.snapshot()
                if not died:
                    r.proc.kill()
                    r.proc.wait(timeout=10)
                r.close()
                r = env.relay()
                r.initialize()
                restarted = True
                back = recover(life, r, steps)
                if back is not None:
                    i = back
                    continue
                if name in ("run1", "run2"):
                    i += 1  # a run is never made again: the next one is a new execution
                continue
            assert res is not None, "step %s: no answer (%r); stderr:\n%s" % (
                name, failure, r.stderr_text()[-3000:])
            if res["isError"]:
                raise AssertionError("step %s failed (point %s, crash at %s): %s"
                                     % (name, point, life.crashed_at, text_of(res)[:2000]))
            i += 1
        # Anything still held is released (the lease count is of what the relay keeps).
        s = structured(r.call_tool("relay_status"))
        for g in s["guests"]:
            res = r.call_tool("relay_release", {"guest": g["guest"]}, timeout=240)
            assert not res["isError"], "release of %s: %s" % (g["guest"], text_of(res))
    finally:
        r.close()
    assert reached, "failpoint %s was never reached in the life %s" % (point, "/".join(steps))
    return life, count(env, life)


def count(env, life):
    evidence = life.crash_evidence or life.got["evidencePath"]
    stats = {}
    # replayed: tokens in the guest's count file more than once
    tokens = life.tokens_seen
    stats["replayed"] = sum(n - 1 for n in collections.Counter(tokens).values() if n > 1)
    # lost: bytes of the crash-time evidence missing from the package; guest receipts missing
    final = tree_hashes(evidence)
    if os.environ.get("RELAY_CRASH_DEBUG"):
        parent = os.path.dirname(evidence)
        print("    evidence %s; beside it: %r; %d files" % (evidence, os.listdir(parent), len(final)))
    have = set(final.values())
    # host/evidence-downloads/ holds the step downloads' status records, which the relay
    # updates (pending, then downloaded): such a record must still be there, not unchanged.
    lost = [p for p, h in life.crash_snapshot.items()
            if os.path.basename(p) not in DERIVED and ".tmp" not in p and h not in have
            and not (p.startswith("host/evidence-downloads/") and p in final)]
    lost += ["guest receipt " + p for p, h in life.guest_receipts.items() if h not in have]
    stats["lost"] = len(lost)
    stats["lost_files"] = lost
    # leases: what the backend still holds, and registry rows
    left = life.leases_left(env)
    reg = os.path.join(env.state_dir, "registry.md")
    rows = registry_rows(open(reg).read()) if os.path.exists(reg) else []
    stats["leases"] = len(left) + len(rows)
    stats["leases_left"] = left + rows
    # unverified: the review of every package of the life (the last one must be delivered)
    unverified = 0
    for folder in life.packages:
        if folder != life.got["evidencePath"] and not os.path.exists(os.path.join(folder, "manifest.json")):
            continue  # an acquisition given up before anything was recorded
        rc = subprocess.run([env.binary, "review", folder], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE).returncode
        unverified += 0 if rc == 0 else 1
    stats["unverified"] = unverified
    stats["executed"] = len(set(tokens))
    return stats


def prepare_project(env):
    ws = os.path.join(env.project, "ws")
    os.makedirs(ws, exist_ok=True)
    with open(os.path.join(ws, "input.txt"), "w") as f:
        f.write("the workspace the matrix stages\n")


def matrix(binary, action):
    if not failpoints_built(binary):
        skip("this build has no failpoints (configure with -DRELAY_FAILPOINTS=ON, as scripts/test does)")
    only = [p for p in os.environ.get("RELAY_CRASH_POINTS", "").split(",") if p]
    # The resident channel's points (run.resident.*, receiver.serve.*) need a transport with the
    # stream trait, which the shim's transport lacks: test_crash_matrix_local.py runs them.
    points = [p for p, can_error in catalogue()
              if (not only or p in only) and (action == "crash" or can_error)
              and not p.startswith(("run.resident.", "receiver.serve."))]
    assert len(points) >= (20 if action == "crash" else 5) or only, points
    rows, bad = [], []
    for point in points:
        env = DeliveryEnv(binary)
        t0 = time.monotonic()
        try:
            prepare_project(env)
            life, stats = run_life(env, point, action)
        finally:
            env.cleanup()
        rows.append((point, life.crashed_at, stats))
        print("  %-34s %s in %-8s runs %d  replayed %d  lost %d  leases %d  unverified %d  (%.1f s)"
              % (point, action, life.crashed_at, stats["executed"], stats["replayed"], stats["lost"],
                 stats["leases"], stats["unverified"], time.monotonic() - t0), flush=True)
        for root in life.guest_roots:
            shutil.rmtree(root, ignore_errors=True)
        if stats["replayed"] or stats["lost"] or stats["leases"] or stats["unverified"]:
            bad.append((point, stats))
            print("    lost: %r; leases left: %r" % (stats["lost_files"], stats["leases_left"]), flush=True)
    total = {k: sum(s[k] for _p, _a, s in rows) for k in ("replayed", "lost", "leases", "unverified")}
    print("%s matrix: %d failpoints, %d replayed, %d lost, %d leases left, %d unverified"
          % (action, len(rows), total["replayed"], total["lost"], total["leases"], total["unverified"]),
          flush=True)
    assert not bad, "the %s matrix is not all zero: %r" % (action, bad)


def test_crash_matrix(binary):
    """Every failpoint set to crash: the relay (or receiver) ends there, a new relay goes on."""
    matrix(binary, "crash")


def test_error_matrix(binary):
    """Every error-capable failpoint set to error: the call fails naming it, the guest is kept,
    and a relay without the failpoint goes on to a verified package."""
    matrix(binary, "error")


if __name__ == "__main__":
    run_tests(globals())
