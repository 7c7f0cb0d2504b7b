"""relay_client: drive the real mcp-relay binary over pipes (Python 3 standard library only).

Every integration test imports this module. It starts the binary with a private temporary
state directory, project folder and TMPDIR, speaks newline-delimited JSON-RPC 2.0 to it, and
offers a tiny test runner. Tests in other folders add this folder to sys.path:

    sys.path.insert(0, os.path.join(os.environ["RELAY_SOURCE_DIR"], "tests", "integration"))
    from relay_client import Relay, run_tests, skip

A test file:

    from relay_client import Relay, run_tests

    def test_status(binary):
        with Relay(binary) as r:
            r.initialize()
            result = r.call_tool("relay_status")
            assert result["isError"] is False, result

    if __name__ == "__main__":
        run_tests(globals())          # parses --binary, runs every test_* function, exits 0/1

The Relay class
---------------
Relay(binary, env=None, project=None, state_dir=None, tmpdir=None, args=(), keep_env=False,
      cwd=None, stdin=None, pass_fds=(), preexec_fn=None)
    Starts `binary [args]`. MCP_RELAY_STATE_DIR, MCP_RELAY_PROJECT and TMPDIR point to fresh
    temporary folders unless given. Every other MCP_RELAY_*, MCP_VM_RELAY_* and
    VM_ENVIRONMENT_FILE variable of the test's own environment is removed (keep_env=True keeps
    them); `env` adds or overrides variables (a value of None removes one). The working folder
    is the project folder unless `cwd` is given; stdin, pass_fds and preexec_fn go to Popen.
    Attributes: proc, state_dir, project, tmpdir, notifications (every notification read so far,
    in order), stderr_path.

  send(obj)                  write one message (dict or list) as one compact JSON line
  send_raw(data)             write bytes exactly as given (add b"\\n" yourself)
  recv(timeout=10)           the next message from stdout, parsed (notifications included)
  recv_raw(timeout=10)       the next line from stdout as bytes (without its newline)
  request(method, params=None, id=None, timeout=10)
                             send a request and return the whole response for its id; the
                             notifications read meanwhile go to .notifications, other responses
                             to .stray
  notify(method, params=None)
  initialize(version="2025-11-25")   the initialize result (also sends notifications/initialized)
  list_tools(meta=None)      the tools/list result
  call_tool(name, arguments=None, meta=None, progress_token=None, timeout=60)
                             the tools/call result; raises RpcError on a JSON-RPC error
  modern_meta(**extra)       a `_meta` object for the 2026-07-28 era
  expect_silence(seconds)    assert that nothing arrives on stdout for that long
  close_stdin(); wait(timeout=10) -> exit status; signal(signo); stderr_text()
  state_files()              every path under the state directory (for "nothing was written")

A JSON-RPC error response raises RpcError (with .code, .message, .data, .response) from
call_tool, list_tools and initialize; request() returns it unchanged.
"""

import argparse
import json
import os
import select
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import time
import traceback

MODERN = "2026-07-28"
NEWEST_LEGACY = "2025-11-25"
LEGACY_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
SUPPORTED_VERSIONS = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


class RpcError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, response):
        err = response.get("error") or {}
        self.code = err.get("code")
        self.message = err.get("message")
        self.data = err.get("data")
        self.response = response
        super().__init__("JSON-RPC error %s: %s" % (self.code, self.message))


class Skip(Exception):
    """Raised by skip(): the test cannot run here (the reason is printed)."""


class NotSelected(Skip):
    """Raised when none of a test's variants is in RELAY_RUNS_VARIANTS: the test is not part
    of this selection, so even RELAY_TESTS_STRICT=1 counts it as a skip."""


def skip(reason):
    raise Skip(reason)


class Relay:
    def __init__(self, binary, env=None, project=None, state_dir=None, tmpdir=None, args=(),
                 keep_env=False, cwd=None, stdin=None, pass_fds=(), preexec_fn=None):
        self.binary = binary
        self._own = tempfile.mkdtemp(prefix="relay-it-")
        self.state_dir = state_dir or os.path.join(self._own, "state")
        self.project = project or os.path.join(self._own, "project")
        self.tmpdir = tmpdir or os.path.join(self._own, "tmp")
        for d in (self.state_dir, self.project, self.tmpdir):
            if d.startswith(self._own):
                os.makedirs(d, mode=0o700, exist_ok=True)
        e = dict(os.environ)
        if not keep_env:
            for k in list(e):
                if k.startswith(("MCP_RELAY_", "MCP_VM_RELAY_")) or k == "VM_ENVIRONMENT_FILE":
                    del e[k]
        e["MCP_RELAY_STATE_DIR"] = self.state_dir
        e["MCP_RELAY_PROJECT"] = self.project
        e["TMPDIR"] = self.tmpdir
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        self.env = e
        self.stderr_path = os.path.join(self._own, "stderr.txt")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [binary] + list(args), stdin=stdin if stdin is not None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, env=e, cwd=cwd or self.project,
            bufsize=0, close_fds=True, pass_fds=pass_fds, preexec_fn=preexec_fn)
        self._buf = b""
        self._lines = []
        self.notifications = []
        self.stray = []
        self._next_id = 0
        self.eof = False

    # -- context manager -------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Ends the process (stdin closed, then SIGKILL after 10 s) and removes the temp folders."""
        if self.proc.poll() is None:
            try:
                self.close_stdin()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout,):
            try:
                f.close()
            except Exception:
                pass
        self._stderr.close()
        shutil.rmtree(self._own, ignore_errors=True)

    # -- raw I/O -----------------------------------------------------------
    def send_raw(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.proc.stdin.fileno(), view)
            view = view[n:]

    def send(self, obj):
        self.send_raw(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")

    def _fill(self, deadline):
        fd = self.proc.stdout.fileno()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no output from mcp-relay in time")
            r, _, _ = select.select([fd], [], [], remaining)
            if r:
                break
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            self.eof = True
            raise EOFError("mcp-relay closed stdout (exit status %r)" % self.proc.poll())
        parts = (self._buf + chunk).split(b"\n")
        self._buf = parts.pop()
        self._lines.extend(parts)

    def recv_raw(self, timeout=10):
        deadline = time.monotonic() + timeout
        while not self._lines:
            self._fill(deadline)
        return self._lines.pop(0)

    def recv(self, timeout=10):
        line = self.recv_raw(timeout)
        try:
            return json.loads(line)
        except ValueError as e:
            raise AssertionError("stdout carried a line that is not JSON: %r (%s)" % (line[:300], e))

    def read_until_eof(self, timeout=10):
        """Every remaining stdout line (bytes) until end of file."""
        out = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                while not self._lines:
                    self._fill(deadline)
                out.append(self._lines.pop(0))
        except EOFError:
            pass
        if self._buf:
            out.append(self._buf)
            self._buf = b""
        return out

    def expect_silence(self, seconds=0.5):
        fd = self.proc.stdout.fileno()
        if self._lines:
            raise AssertionError("unexpected output: %r" % self._lines[0][:300])
        r, _, _ = select.select([fd], [], [], seconds)
        if r:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                raise AssertionError("unexpected output: %r" % chunk[:300])

    # -- JSON-RPC ----------------------------------------------------------
    def next_id(self):
        self._next_id += 1
        return self._next_id

    def request(self, method, params=None, id=None, timeout=10):
        rid = self.next_id() if id is None else id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.wait_response(rid, timeout)

    def wait_response(self, rid, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.001, deadline - time.monotonic()))
            if isinstance(msg, dict) and "method" in msg and "id" not in msg:
                self.notifications.append(msg)
                continue
            if isinstance(msg, dict) and msg.get("id") == rid and type(msg.get("id")) is type(rid):
                return msg
            self.stray.append(msg)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    @staticmethod
    def modern_meta(**extra):
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {}}
        meta.update(extra)
        return meta

    @staticmethod
    def _result(resp):
        if "error" in resp:
            raise RpcError(resp)
        return resp["result"]

    def initialize(self, version=NEWEST_LEGACY, initialized=True):
        resp = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                           "clientInfo": {"name": "relay_client", "version": "1"}})
        result = self._result(resp)
        if initialized:
            self.notify("notifications/initialized")
        return result

    def list_tools(self, meta=None):
        params = {} if meta is None else {"_meta": meta}
        return self._result(self.request("tools/list", params))

    def call_tool(self, name, arguments=None, meta=None, progress_token=None, timeout=60):
        params = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        if meta is not None or progress_token is not None:
            m = dict(meta or {})
            if progress_token is not None:
                m["progressToken"] = progress_token
            params["_meta"] = m
        return self._result(self.request("tools/call", params, timeout=timeout))

    # -- process -----------------------------------------------------------
    def close_stdin(self):
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def wait(self, timeout=10):
        return self.proc.wait(timeout=timeout)

    def signal(self, signo=_signal.SIGTERM):
        self.proc.send_signal(signo)

    def stderr_text(self):
        self._stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def state_files(self):
        out = set()
        for root, dirs, files in os.walk(self.state_dir):
            for name in dirs + files:
                out.add(os.path.relpath(os.path.join(root, name), self.state_dir))
        return out


def text_json(result):
    """The JSON after the headline of a tool result's text block, parsed."""
    text = result["content"][0]["text"]
    headline, _, rest = text.partition("\n")
    return headline, json.loads(rest)


# -- a tiny test runner -----------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.environ.get("RELAY_BINARY"),
                    help="the mcp-relay executable (or RELAY_BINARY)")
    ap.add_argument("-k", dest="only", default=None, help="run only tests whose name contains this")
    args, _ = ap.parse_known_args(argv)
    if not args.binary:
        ap.error("--binary is required")
    args.binary = os.path.abspath(args.binary)
    return args


def strict_skips():
    """RELAY_TESTS_STRICT=1 (CI's ordinary-user lane): a test that skips has failed, so a lane
    chosen because its tests must run here cannot pass by skipping them all."""
    return os.environ.get("RELAY_TESTS_STRICT") == "1"


def run_tests(namespace, argv=None):
    """Runs every test_* function of `namespace` (a module's globals()) with the binary path;
    prints one line per test; exits 0 when none failed."""
    args = parse_args(argv)
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    failed = 0
    for name, fn in tests:
        if args.only and args.only not in name:
            continue
        t0 = time.monotonic()
        try:
            fn(args.binary)
        except Skip as e:
            if strict_skips() and not isinstance(e, NotSelected):
                failed += 1
                print("FAIL %s: skipped (%s), and RELAY_TESTS_STRICT=1 counts a skip as a failure"
                      % (name, e), flush=True)
                continue
            print("SKIP %s: %s" % (name, e), flush=True)
            continue
        except Exception:
            failed += 1
            print("FAIL %s (%.2f s)" % (name, time.monotonic() - t0), flush=True)
            traceback.print_exc(file=sys.stdout)
            continue
        print("PASS %s (%.2f s)" % (name, time.monotonic() - t0), flush=True)
    print("%d failed" % failed, flush=True)
    sys.exit(1 if failed else 0)


def sanitized_build(binary=None):
    """True when the binary under test was built with AddressSanitizer (it names itself in
    its symbols), or RELAY_BUILD_DIR's cache says RELAY_SANITIZE=ON."""
    if binary:
        try:
            with open(binary, "rb") as f:
                if b"__asan_init" in f.read():
                    return True
        except OSError:
            pass
    build = os.environ.get("RELAY_BUILD_DIR")
    if not build:
        return False
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("RELAY_SANITIZE:BOOL="):
                    return line.strip().endswith("=ON")
    except OSError:
        pass
    return False
