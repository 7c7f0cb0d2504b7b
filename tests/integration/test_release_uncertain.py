#!/usr/bin/env python3
"""Release after an uncertain acquisition (issue 17 defect 6; spec/lifecycle.md §9, spec/tools.md §3.10).

A relay on machine-local is killed with SIGKILL while machine-local sets a guest up (a few
milliseconds after its lease record appears, while the guest's init is being launched, so the
init may be running before the record names it). A new relay with the same MCP_RELAY_SESSION
takes the guest back as uncertain and relay_release settles it. Whatever release answers must
be true when it answers: a success (released, or nothing leased) only once no lease folder of
the guest and no process of it is left; otherwise an error that keeps the guest (then release
is called again until it succeeds). Several trials cover the launch window.

Defect 6 was: the start-up reaper removed the half-made guest's record while its folder could
not go (the orphaned init kept writing in it), so relay_release answered "nothing was ever
leased" with the folder and the guest's init still there until a later relay start.
"""

import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, skip  # noqa: E402
from lifecycle_support import send_call  # noqa: E402
from support_common import namespaces_missing, plugin_so, structured  # noqa: E402

TRIALS = 10
OPTIONS = '{"display": "off", "backstopMs": 3000, "reaperIntervalMs": 500}'


def guest_processes(lease_dir):
    """Processes whose command line names the lease folder (machine-local-init and its guest)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if lease_dir in cmd:
            out.append((int(pid), cmd[:120]))
    return out


def one_trial(binary, root, trial):
    state = os.path.join(root, "state-%d" % trial)
    project = os.path.join(root, "project-%d" % trial)
    os.makedirs(state)
    os.makedirs(project)
    env = {"MCP_RELAY_BACKEND": "local", "MCP_RELAY_SESSION": "defect6", "HOME": root,
           "MCP_RELAY_LOCAL_OPTIONS": OPTIONS}
    leases = os.path.join(state, "plugins", "machine-local", "leases")
    r = Relay(binary, env=env, state_dir=state, project=project)
    try:
        r.initialize()
        send_call(r, "relay_acquire", {"task": "defect6", "image": "local", "extractions": []})
        deadline = time.monotonic() + 60
        while not any(os.path.exists(os.path.join(leases, n, "lease.json"))
                      for n in (os.listdir(leases) if os.path.isdir(leases) else [])):
            assert time.monotonic() < deadline, "machine-local never wrote a lease record"
            time.sleep(0.002)
        time.sleep(random.uniform(0, 0.05))
        r.proc.send_signal(signal.SIGKILL)
        r.proc.wait(timeout=10)
    finally:
        r.close()
    folders = [os.path.join(leases, n) for n in os.listdir(leases)]
    answers = []
    r = Relay(binary, env=env, state_dir=state, project=project)
    try:
        r.initialize()
        s = structured(r.call_tool("relay_status"))
        names = [g["guest"] for g in s["guests"]]
        assert names, "the guest of the killed acquisition was not taken back: %r" % s
        for name in names:
            deadline = time.monotonic() + 90
            while True:
                res = r.call_tool("relay_release", {"guest": name}, timeout=120)
                text = res["content"][0]["text"].split("\n")[0]
                answers.append(("error: " if res["isError"] else "") + text[:90])
                if not res["isError"]:
                    break
                # An error keeps the guest: true only if something is left to settle.
                assert os.listdir(leases) or any(guest_processes(f) for f in folders), (
                    "release failed with nothing left: %s" % text)
                assert time.monotonic() < deadline, "release never succeeded: %r" % answers
                time.sleep(1)
            # Answered success: it must be true now, not after the next relay start.
            left = os.listdir(leases) if os.path.isdir(leases) else []
            procs = [p for f in folders for p in guest_processes(f)]
            assert left == [] and procs == [], (
                "relay_release answered %r but left lease folders %r and processes %r"
                % (answers[-1], left, procs))
    finally:
        r.close()
    return answers


def test_release_after_uncertain_acquisition(binary):
    why = namespaces_missing()
    if why:
        skip(why)
    if not os.path.exists(plugin_so(binary, "machine-local")):
        skip("machine-local.so is not built")
    root = tempfile.mkdtemp(prefix="relay-defect6-")
    try:
        for trial in range(TRIALS):
            answers = one_trial(binary, root, trial)
            print("  trial %d: %s" % (trial, " / ".join(answers)), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
