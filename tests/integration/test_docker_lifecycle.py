#!/usr/bin/env python3
"""machine-docker leases over time, through the real binary against a real engine
(docker_support.py), with the relay's clock driven by MCP_RELAY_TEST_CLOCK_FILE:

  - a relay killed with SIGKILL leaves its guest running (the pause rule); a new relay of the
    same session takes it back by its record and labels, renews it at once (the expiry inside
    the container moves, the owner becomes the new relay), runs in it again and nothing is
    replayed;
  - a relay of another session on the same store reaps a lease whose expiry and grace passed
    while the relay that held it is dead;
  - the backstop: the container's own init stops it once the expiry it was given passes with
    no renewal, and the relay then reports the guest failed.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, plugin_missing, store_of, structured, text_of  # noqa: E402


class Clock:
    def __init__(self, root):
        self.path = os.path.join(root, "clock")
        self.ms = int(time.time() * 1000)
        self.set(self.ms)

    def set(self, ms):
        self.ms = ms
        with open(self.path + ".tmp", "w") as f:
            f.write("@%d\n" % ms)
        os.replace(self.path + ".tmp", self.path)

    def advance(self, ms):
        self.set(self.ms + ms)


def kill9(r):
    r.proc.send_signal(signal.SIGKILL)
    r.proc.wait(timeout=10)


def expires_in(eng, vm):
    """The "<expiresAtMs> <graceMs> <backstopMs>" the container's init goes by: /.mcp-relay/expires
    once a renewal wrote it, before that the arguments the container was created with
    (`/.mcp-relay/init init EXPIRES GRACE BACKSTOP`)."""
    code, _ = eng.api("GET", "/containers/%s/archive?path=%s" % (vm, "%2F.mcp-relay%2Fexpires"))
    if code == 200:
        return [int(x) for x in eng.exec_cat(vm, "/.mcp-relay/expires").split()]
    cmd = eng.inspect(vm)["Config"]["Cmd"]
    assert cmd[0] == "init" and len(cmd) == 4, cmd
    return [int(x) for x in cmd[1:]]


def run(r, guest, code):
    res = r.call_tool("relay_script", {"guest": guest, "language": "shell", "inline": True, "code": code},
                      timeout=180)
    assert res["isError"] is False, text_of(res)
    return structured(res)


def guest_of(r, name):
    for g in structured(r.call_tool("relay_status"))["guests"]:
        if g["guest"] == name:
            return g
    return None


def wait_for(what, predicate, timeout=30, show=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError("never saw %s%s" % (what, (": %s" % show()) if show else ""))


def setup(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    root = tempfile.mkdtemp(prefix="relay-docker-life-")
    state, project = os.path.join(root, "state"), os.path.join(root, "project")
    os.makedirs(state)
    os.makedirs(project)
    return root, state, project, Clock(root)


def test_restart_takes_the_guest_back(binary):
    root, state, project, clock = setup(binary)
    try:
        with Engine() as eng:
            images = {"minimal": eng.image("minimal")}
            env = {"MCP_RELAY_SESSION": "docker-restart", "MCP_RELAY_TEST_CLOCK_FILE": clock.path}
            r1 = eng.relay(binary, images, state_dir=state, project=project, **env)
            r1.initialize()
            acq = acquire(r1, "minimal")
            g, vm = acq["guest"], acq["vm"]
            assert r1.call_tool("relay_stage", {"guest": g}, timeout=300)["isError"] is False
            first = run(r1, g, "echo one")
            assert first["stdout"] == "one\n"
            container_id = eng.inspect(vm)["Id"]
            before = expires_in(eng, vm)
            assert before[0] == acq_expiry(state, vm), before
            kill9(r1)
            r1.close()
            # The guest outlived its relay.
            assert eng.inspect(vm)["State"]["Running"] is True

            clock.advance(10 * 60 * 1000)
            with eng.relay(binary, images, state_dir=state, project=project, **env) as r2:
                r2.initialize()
                wait_for("the guest ready again", lambda: (guest_of(r2, g) or {}).get("phase") == "staged",
                         show=lambda: json.dumps(guest_of(r2, g))[:2000] + r2.stderr_text()[-2000:])
                # Renewed at once: the expiry inside the container moved with the relay's clock.
                after = wait_for("the renewed expiry", lambda: (lambda e: e if e[0] > before[0] else None)(
                    expires_in(eng, vm)))
                assert after[0] >= clock.ms, (after, clock.ms)
                with open(os.path.join(store_of(r2), "leases", vm + ".json")) as f:
                    rec = json.load(f)
                assert rec["owner"]["pid"] == r2.proc.pid, rec["owner"]
                assert eng.inspect(vm)["Id"] == container_id, "a new container was made"
                second = run(r2, g, "echo two")
                assert second["stdout"] == "two\n" and second["executionId"] != first["executionId"]
                receipts = os.listdir(os.path.join(acq["evidencePath"], "host", "receipts"))
                assert sorted(receipts) == sorted([first["executionId"] + ".json",
                                                   second["executionId"] + ".json"]), receipts
                rel = r2.call_tool("relay_release", {"guest": g}, timeout=120)
                assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
                assert eng.inspect(vm) is None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def acq_expiry(state, vm):
    with open(os.path.join(state, "plugins", "machine-docker", "leases", vm + ".json")) as f:
        return json.load(f)["expiresAtMs"]


def test_reaper_removes_leases_of_dead_relays(binary):
    root, state, project, clock = setup(binary)
    try:
        with Engine() as eng:
            images = {"minimal": eng.image("minimal")}
            opts = {"graceMs": 1000}
            r1 = eng.relay(binary, images, state_dir=state, project=project, extra_options=opts,
                           MCP_RELAY_SESSION="docker-reap-a", MCP_RELAY_TEST_CLOCK_FILE=clock.path)
            r1.initialize()
            acq = acquire(r1, "minimal")
            vm = acq["vm"]
            kill9(r1)
            r1.close()
            assert eng.inspect(vm)["State"]["Running"] is True
            # Another relay on the same store, not yet past the expiry: nothing is reaped.
            with eng.relay(binary, images, state_dir=state, project=project, extra_options=opts,
                           MCP_RELAY_SESSION="docker-reap-b", MCP_RELAY_TEST_CLOCK_FILE=clock.path) as r2:
                r2.initialize()
                # Its plugins load with its first call that needs the backend.
                assert r2.call_tool("relay_probe", {"scope": "host"}, timeout=120)["isError"] is False
                time.sleep(2)
                assert eng.inspect(vm) is not None, "reaped before its expiry"
                # Past the expiry and the grace, with its relay dead: reaped.
                clock.advance(16 * 60 * 1000 + 2000)
                wait_for("the expired lease reaped", lambda: eng.inspect(vm) is None, timeout=30)
                assert not os.path.exists(os.path.join(store_of(r2), "leases", vm + ".json"))
                assert eng.containers(lease_id=acq["lease_id"]) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_backstop_stops_an_unrenewed_container(binary):
    root, state, project, clock = setup(binary)
    try:
        with Engine() as eng:
            images = {"minimal": eng.image("minimal")}
            opts = {"graceMs": 0, "backstopMs": 0}
            with eng.relay(binary, images, state_dir=state, project=project, extra_options=opts,
                           MCP_RELAY_TEST_CLOCK_FILE=clock.path) as r:
                r.initialize()
                acq = acquire(r, "minimal")
                g, vm = acq["guest"], acq["vm"]
                assert eng.inspect(vm)["State"]["Running"] is True
                # What a renewal writes, with an expiry already past: as if no relay renewed it.
                past = int(time.time() * 1000) - 1000
                eng.put_file(vm, "/.mcp-relay", "expires", b"%d 0 0\n" % past)
                wait_for("the container stopped by its backstop",
                         lambda: not eng.inspect(vm)["State"]["Running"], timeout=20)
                assert eng.inspect(vm)["State"]["ExitCode"] == 0
                logs = eng.logs(vm)
                assert "the lease expired and no relay renewed it" in logs, logs
                # The relay sees the guest failed, and release still removes it.
                rel = r.call_tool("relay_release", {"guest": g}, timeout=120)
                assert rel["isError"] is False and structured(rel)["destructionVerified"] is True, text_of(rel)
                assert eng.inspect(vm) is None
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
