"""lifecycle_support: what the lifecycle integration tests share (test_lifecycle_*.py).

They drive the real mcp-relay binary (through relay_client.Relay) over the fault shim
tests/plugins/machine-faultshim wrapping a real machine plugin (reference-machine by default),
loaded through the real loader, with a frozen test clock (MCP_RELAY_TEST_CLOCK_FILE holding
"@<unix ms>") and one state folder and project folder that outlive each relay process, so that
a test can kill a relay and start another with the same MCP_RELAY_SESSION.

    fake = Shim(binary)                # skips the test when the shim or the plugin is not built
    fake.script([{"op": "acquire", "fault": "fail", "code": "at capacity", "times": 2}])
    with fake.relay() as r:            # a Relay on the shim, session "s1" by default
        r.initialize()
        res = acquire(r, image=fake.image)
    fake.ops("acquire")                # what the backend was asked (a line when each call began)
    fake.ended("acquire")              # and how each ended ("result")
    fake.advance(60_000)               # moves relay time
    fake.cleanup()

script() writes the shim's rules ({"faults": [...]}, read again by the shim at every operation);
the log's entries carry the call's first text argument as "arg" (the acquire spec, the lease,
the purpose).
"""

import hashlib
import json
import os
import shutil
import signal
import tempfile
import time

from relay_client import Relay, skip
from support_common import structured  # noqa: F401 (re-exported)

ACQUIRE = {"task": "demo", "image": "ubuntu2404", "extractions": []}
WINDOW_MS = 15 * 60 * 1000
BACKEND_MIN_MS = 6 * 60 * 1000


class Backend:
    """The shared folders, clock, script and log of one test over the plugin `so`."""

    def __init__(self, binary, so, session="s1", start_ms=None):
        self.binary = binary
        self.so = so
        if not os.path.exists(self.so):
            skip("%s is not built; build its target" % self.so)
        self.root = tempfile.mkdtemp(prefix="relay-lc-")
        os.chmod(self.root, 0o700)
        self.state_dir = os.path.join(self.root, "state")
        self.project = os.path.join(self.root, "project")
        for d in (self.state_dir, self.project):
            os.makedirs(d, mode=0o700)
        self.control = os.path.join(self.root, "control.json")
        self.log = os.path.join(self.root, "ops.jsonl")
        self.clock = os.path.join(self.root, "clock")
        self.session = session
        self.now_ms = start_ms or int(time.time() * 1000)
        self._write_clock()
        self.script({})

    # -- files -------------------------------------------------------------
    def _write_clock(self):
        tmp = self.clock + ".tmp"
        with open(tmp, "w") as f:
            f.write("@%d\n" % self.now_ms)
        os.replace(tmp, self.clock)

    def advance(self, ms):
        """Moves the frozen relay time forward by `ms`."""
        self.now_ms += ms
        self._write_clock()

    def script(self, control):
        """Writes the backend's control document whole."""
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            json.dump(control, f)
        os.replace(tmp, self.control)

    def read_control(self):
        with open(self.control) as f:
            return json.load(f)

    def ops(self, op=None, pid=None):
        """The logged calls, oldest first; only `op` (a name or a tuple of names) when given."""
        out = []
        try:
            with open(self.log) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    entry = json.loads(line)
                    if op is not None and entry["op"] not in ((op,) if isinstance(op, str) else op):
                        continue
                    if pid is not None and entry.get("pid") != pid:
                        continue
                    out.append(entry)
        except FileNotFoundError:
            pass
        return out

    def wait_ops(self, op, count, timeout=20, pid=None):
        """Waits until at least `count` calls of `op` were logged; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.ops(op, pid=pid)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError("the backend saw %d %s call(s), expected %d: %r"
                                     % (len(found), op, count, self.ops()[-10:]))
            time.sleep(0.02)

    @property
    def session_dir(self):
        key = hashlib.sha256(self.session.encode()).hexdigest()[:32]
        return os.path.join(self.state_dir, key)

    def record(self, guest):
        with open(os.path.join(self.session_dir, "guests", guest, "lease.json")) as f:
            return json.load(f)

    def registry_text(self, path=None):
        path = path or os.path.join(self.state_dir, "registry.md")
        try:
            with open(path, newline="") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def events(self, evidence_path, kind=None):
        """The lifecycle events of an evidence folder (host/events and .lifecycle-events)."""
        out = []
        for folder in (os.path.join(evidence_path, "host", "events"), evidence_path + ".lifecycle-events"):
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                with open(os.path.join(folder, name)) as f:
                    event = json.load(f)
                if kind is None or event["kind"] == kind:
                    out.append(event)
        return out

    def env(self, **extra):
        e = {
            "MCP_RELAY_BACKEND": self.so,
            "MCP_RELAY_SESSION": self.session,
            "MCP_RELAY_TEST_CLOCK_FILE": self.clock,
            "HOME": self.root,  # no ~/AGENTS.md unless a test writes one
        }
        e.update({k: (None if v is None else str(v)) for k, v in extra.items()})
        return e

    def relay(self, **extra):
        """A Relay on the backend sharing this test's state and project folders."""
        return Relay(self.binary, env=self.env(**extra), state_dir=self.state_dir, project=self.project)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


class Shim(Backend):
    """A test's folders over machine-faultshim wrapping the real machine plugin `inner`."""

    IMAGES = {"reference-machine": "folder"}

    def __init__(self, binary, inner="reference-machine", **kw):
        build = os.environ.get("RELAY_BUILD_DIR") or os.path.dirname(os.path.abspath(binary))
        self.inner = inner
        self.inner_so = os.path.join(build, "lib", "mcp-relay", "plugins", inner + ".so")
        self.shim_so = os.path.join(build, "tests", "plugins", "machine-faultshim.so")
        for so in (self.inner_so, self.shim_so):
            if not os.path.exists(so):
                skip("%s is not built; build its target" % so)
        super().__init__(binary, self.shim_so, **kw)

    @property
    def image(self):
        """The image the wrapped plugin offers."""
        return self.IMAGES.get(self.inner, "ubuntu2404")

    def script(self, faults, **extra):
        """The shim's fault rules (tests/plugins/machine-faultshim/faultshim.c), as a list, and
        what else its script holds (leaseExtra=..., binding=...)."""
        super().script(dict({"faults": list(faults or [])}, **extra))

    def spec(self, entry):
        """The acquire spec a logged acquire carried."""
        return json.loads(entry["arg"])

    @property
    def plugin_state(self):
        """The wrapped plugin's stateDir: the shim's own, which it hands on."""
        return os.path.join(self.state_dir, "plugins", "machine-faultshim")

    def lease_file(self, vm):
        """Where reference-machine keeps the lease of `vm`."""
        return os.path.join(self.plugin_state, "guests", vm, "lease.json")

    def leased_vms(self):
        """The vms reference-machine holds a lease of, sorted."""
        root = os.path.join(self.plugin_state, "guests")
        return sorted(vm for vm in (os.listdir(root) if os.path.isdir(root) else [])
                      if os.path.exists(self.lease_file(vm)))

    def ended(self, op, pid=None):
        """The log lines of the calls of `op` that ended (each with its "result")."""
        return self.ops(op + ":end", pid=pid)

    def env(self, **extra):
        e = super().env()
        e.update({"MCP_RELAY_FAULTSHIM_PLUGIN": self.inner_so, "MCP_RELAY_FAULTSHIM_CONTROL": self.control,
                  "MCP_RELAY_FAULTSHIM_LOG": self.log})
        e.update({k: (None if v is None else str(v)) for k, v in extra.items()})
        return e


def status(r):
    return structured(r.call_tool("relay_status"))


def guest_entry(r, name):
    for g in status(r)["guests"]:
        if g["guest"] == name:
            return g
    return None


def wait_status(r, predicate, timeout=20, what="the expected status"):
    """Polls relay_status until predicate(status) holds; returns that status."""
    deadline = time.monotonic() + timeout
    while True:
        s = status(r)
        if predicate(s):
            return s
        if time.monotonic() > deadline:
            raise AssertionError("relay_status never showed %s: %s" % (what, json.dumps(s)[:3000]))
        time.sleep(0.05)


def acquire(r, **overrides):
    args = dict(ACQUIRE)
    args.update(overrides)
    res = r.call_tool("relay_acquire", args)
    assert res["isError"] is False, res["content"][0]["text"]
    return structured(res)


def send_call(r, name, arguments, progress_token=None):
    """Sends a tools/call without waiting; returns its id."""
    rid = r.next_id()
    params = {"name": name, "arguments": arguments}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    r.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    return rid


def response_for(r, rid, timeout=20):
    """The response to `rid`, whether it was already read (stray) or is still to come."""
    for i, msg in enumerate(r.stray):
        if isinstance(msg, dict) and msg.get("id") == rid:
            return r.stray.pop(i)
    return r.wait_response(rid, timeout)


def kill9(r):
    r.proc.send_signal(signal.SIGKILL)
    r.proc.wait(timeout=10)


def registry_rows(text):
    return [line for line in text.splitlines() if line.startswith("| ") and "mcp-relay" in line]
