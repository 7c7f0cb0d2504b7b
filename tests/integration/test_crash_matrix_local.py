#!/usr/bin/env python3
"""The crash matrix on machine-local, for the receiver's failpoints (issue 17 point 3;
docs/reliability.md §3).

machine-local starts the receiver in its guest with a clean environment; in a failpoint build
the core passes the receiver entries of its own MCP_RELAY_FAILPOINTS in the environment of the
receiver commands it runs (core/src/guestio/exec.c), so the receiver's points fire in a real
machine-local guest too. For every `receiver.*` point of guest/receiver/failpoint.c, one
guest's life (acquire, stage, two runs, finish) runs with MCP_RELAY_FAILPOINTS=<point>=crash;
the receiver ends with _exit(86) there and the call's answer names the failpoint; the relay is
then killed, another starts with the same session and no failpoint, takes the guest back
(machine-local guests outlive their relay), and the life goes on to a delivered package.
Counted, per point, as on machine-fake (test_crash_matrix.py), and asserted zero: runs
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
from test_crash_matrix import Life, catalogue, failpoints_built, prepare_project, run_life  # noqa: E402

LOCAL_STEPS = ("acquire", "stage", "run1", "run2", "finish")
LOCAL_OPTIONS = {"display": "off", "maxGuests": 2}


class LocalLife(Life):
    """The life on machine-local: no declared outputs, the guest read through the relay."""

    def step(self, r, name):
        if name == "acquire":
            res = self.call(r, "relay_acquire", {"task": "matrix", "image": "local", "extractions": []})
            if not res["isError"]:
                self.got = structured(res)
                self.packages.append(self.got["evidencePath"])
                self.guest = self.got["guest"]
                self.guest_roots.append(self.got["guestRoot"])
            return res
        return Life.step(self, r, name)

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
    points = [p for p, _e in catalogue() if p.startswith("receiver.") and (not only or p in only)]
    assert len(points) >= 5 or only, points
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


if __name__ == "__main__":
    run_tests(globals())
