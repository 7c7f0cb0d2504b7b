"""service_support: what the machine-service integration tests share (test_service_*.py).

They drive the real mcp-relay binary with MCP_RELAY_BACKEND=machine-service and MCP_RELAY_URL at
the real machine-service-standin (tests/fixtures/machine-service-standin), and look at what
the stand-in received (its request log), at files on disk and at the tool results.

    svc = Standin(["--vnc", "linux"])           # skips when the stand-in or plugin is not built
    with svc.relay(binary) as r:                # a Relay on machine-service at the stand-in
        r.initialize()
        r.call_tool("relay_search", {"name": "chromium"})
    svc.requests("POST", "/acquire")            # what the stand-in saw
    svc.fault({"route": "acquire", "status": 500})
    svc.stop()
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

from relay_client import Relay, skip
from support_common import build_dir, structured  # noqa: F401 (re-exported)


def standin_binary(binary):
    return os.path.join(build_dir(binary), "tests", "fixtures", "machine-service-standin",
                        "machine-service-standin")


def plugin_dir(binary):
    return os.path.join(build_dir(binary), "lib", "mcp-relay", "plugins")


class Standin:
    """One running machine-service-standin on a free loopback port."""

    def __init__(self, binary, args=(), root=None):
        self.binary = binary
        exe = standin_binary(binary)
        if not os.access(exe, os.X_OK):
            skip("machine-service-standin is not built (%s)" % exe)
        if not os.path.exists(os.path.join(plugin_dir(binary), "machine-service.so")):
            skip("machine-service.so is not built in %s" % plugin_dir(binary))
        self.own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="standin-it-")
        self.args = list(args)
        self.stderr_path = os.path.join(self.root, "standin-stderr.txt")
        self.proc = None
        self.url = None
        self.start()

    def start(self):
        err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            [standin_binary(self.binary), "--root", self.root] + self.args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, close_fds=True)
        err.close()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("machine-service-standin did not start: %s" % self.stderr())
        self.url = json.loads(line)["url"]

    def stderr(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-3000:]
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        if self.proc:
            self.proc.stdout.close()
        self.proc = None

    def cleanup(self):
        self.stop()
        if self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- HTTP to the stand-in (test hooks and direct reads) -------------------
    def http(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def requests(self, method=None, path=None, prefix=None):
        status, body = self.http("GET", "/_standin/requests")
        assert status == 200, body
        out = []
        for entry in body["requests"]:
            if method and entry["method"] != method:
                continue
            if path and entry["path"] != path:
                continue
            if prefix and not entry["path"].startswith(prefix):
                continue
            out.append(entry)
        return out

    def fault(self, spec):
        status, body = self.http("POST", "/_standin/faults", spec)
        assert status == 200, body

    def machines(self):
        status, body = self.http("GET", "/machines")
        assert status == 200, body
        return body.get("machines") or body.get("vms") or {}

    # -- the relay -------------------------------------------------------------
    def env(self, **extra):
        e = {
            "MCP_RELAY_BACKEND": "machine-service",
            "MCP_RELAY_URL": self.url,
            "MCP_RELAY_PLUGIN_PATH": plugin_dir(self.binary),
            "MCP_RELAY_MACHINE_SERVICE_OPTIONS": json.dumps({"destructionCheck": "service"}),
        }
        e.update({k: (None if v is None else str(v)) for k, v in extra.items()})
        return e

    def relay(self, binary, **extra):
        kwargs = {}
        for k in ("state_dir", "project", "tmpdir"):
            if k in extra:
                kwargs[k] = extra.pop(k)
        return Relay(binary, env=self.env(**extra), **kwargs)


def error_code(result):
    return structured(result).get("error", {}).get("code")


def text(result):
    return result["content"][0]["text"]


def wait_until(predicate, timeout=30, what="the condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


def write_clock(path, ms):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("@%d\n" % ms)
    os.replace(tmp, path)
