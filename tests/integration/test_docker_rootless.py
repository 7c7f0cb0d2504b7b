#!/usr/bin/env python3
"""machine-docker on a user's own rootless Podman (issue 21, item 6), as an ordinary user.

Run as root, the test runs itself again as `relayci` (an ordinary user with a subordinate id
range); run as an ordinary user, it is that user. The user starts their own service
(`podman system service`, with storage, run root and XDG_RUNTIME_DIR in a folder of the test's
own), and a relay run as the same user does what a user does: doctor, acquire, stage, a
recorded run, finish, and the guest is gone. On this host (cgroup v1) rootless Podman cannot
set the pids, memory and CPU limits: the lease record says so (limitsNotApplied) and doctor
warns, never a silent drop. options.runtime naming a runtime the service does not use is
refused with the remedy that works for Podman (start the service with that runtime), not
"set options.runtime", which Podman's compatible API ignores.
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import (Engine, acquire, doctor, doctor_line, plugin_missing, store_of,  # noqa: E402
                            structured, text_of)

USER = "relayci"
ENV_DIR = "RELAY_DOCKER_ROOTLESS_DIR"


def rerun_as_user(binary, script=__file__, prefix=None, env_extra=None, only=None):
    """Runs `script` as USER with a rootless service folder of its own (ENV_DIR) and exits
    through its verdict; `prefix` (a command root runs first that execs the rest),
    `env_extra` and `only` (its -k) as the caller needs."""
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        skip("there is no ordinary user %s to run a rootless engine as" % USER)
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        skip("%s is missing (the user cannot run root's python)" % python)
    folder = tempfile.mkdtemp(prefix="rl-docker-", dir=pw.pw_dir)  # podman: a run root under 50 bytes
    os.chown(folder, pw.pw_uid, pw.pw_gid)
    try:
        env = {"HOME": pw.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
               ENV_DIR: folder, "RELAY_DOCKER_CACHE": os.path.join(folder, "cache"),
               "PYTHONDONTWRITEBYTECODE": "1"}
        for k in ("RELAY_BUILD_DIR", "RELAY_SOURCE_DIR", "RELAY_FAILPOINTS", "RELAY_DOCKER_KEEP_LOG"):
            if os.environ.get(k):
                env[k] = os.environ[k]
        env.update(env_extra or {})
        argv = list(prefix or []) + ["runuser", "-u", USER, "--", "env", "-i"] + [
            "%s=%s" % kv for kv in env.items()] + [python, os.path.abspath(script), "--binary", os.path.abspath(binary)]
        if only:
            argv += ["-k", only]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500,
                           cwd=folder)
        print(p.stdout)
        if p.returncode != 0:
            raise AssertionError("the test as %s failed (exit %d)" % (USER, p.returncode))
        if "SKIP" in p.stdout and "PASS" not in p.stdout:
            skip("as %s: %s" % (USER, p.stdout.strip().splitlines()[-2:]))
    finally:
        # The user's storage has files of its subordinate ids: remove them in the user's namespace.
        subprocess.run(["runuser", "-u", USER, "--", "podman", "unshare", "rm", "-rf", folder],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        shutil.rmtree(folder, ignore_errors=True)


def lease_records(r):
    folder = os.path.join(store_of(r), "leases")
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                out.append(json.load(f))
    return out


def cgroup_v1():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4] == "/sys/fs/cgroup":
                return " - cgroup2 " not in line
    return False


def as_user(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    folder = os.environ.get(ENV_DIR) or tempfile.mkdtemp(prefix="rl-docker-")
    with Engine(rootless_dir=folder) as eng:
        code, info = eng.api("GET", "/info")
        assert code == 200 and info.get("Rootless") is True, info
        images = {"minimal": eng.image("minimal")}
        opts = {"endpoint": eng.endpoint, "images": images}
        if eng.runtime:
            opts["runtime"] = eng.runtime
        rc, out = doctor(binary, opts)
        print(out)
        assert doctor_line(out, "endpoint")[0].startswith("ok"), out
        limits_line = doctor_line(out, "cgroups")[0]
        if cgroup_v1():
            assert limits_line.startswith("WARN") and "rootless Podman on cgroup v1" in limits_line, limits_line
        with eng.relay(binary, images) as r:
            r.initialize()
            g = acquire(r, "minimal", extractions=[{"name": "out", "path": "out"}])
            name = g["guest"]
            rec = [x for x in lease_records(r) if x.get("vm") == g["vm"]][0]
            if cgroup_v1():
                assert "rootless Podman on cgroup v1" in (rec.get("limitsNotApplied") or ""), rec
            else:
                assert rec.get("limitsNotApplied") is None, rec
            res = r.call_tool("relay_stage", {"guest": name}, timeout=300)
            assert res["isError"] is False, text_of(res)
            run = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True,
                                               "code": "mkdir -p out && id -u > out/uid && echo ran"}, timeout=300)
            assert run["isError"] is False, text_of(run)
            s = structured(run)
            assert s["outcome"]["exitStatus"]["code"] == 0 and "ran" in s["stdout"], s
            res = r.call_tool("relay_finish", {"guest": name}, timeout=600)
            assert res["isError"] is False, text_of(res)
            fin = structured(res)
            print("  finish: %s" % text_of(res).split("\n")[0])
            assert eng.containers(store=store_of(r)) == [], eng.containers(store=store_of(r))
            assert fin.get("evidencePath") or fin.get("package"), fin
        # A runtime the service does not run with is refused with Podman's remedy.
        other = "crun" if (eng.runtime or "runc") == "runc" else "runc"
        with eng.relay(binary, images, extra_options={"runtime": other}) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", {"task": "rt", "image": "minimal", "extractions": []}, timeout=300)
            text = text_of(res)
            assert res["isError"] is True and "podman --runtime" in text, text
            assert eng.containers(store=store_of(r)) == []


def test_rootless_podman_as_an_ordinary_user(binary):
    if os.geteuid() == 0:
        rerun_as_user(binary)
    else:
        as_user(binary)


if __name__ == "__main__":
    run_tests(globals())
