#!/usr/bin/env python3
"""Startup cost guards (core/src/cli/lazy_libs.h): libcurl, libarchive, libpng and zlib are loaded on
first use, not at startup, in builds made with RELAY_LAZY_LIBS (the default on x86-64 Linux);
and they do load, transparently, when a call needs them."""
import http.server
import os
import shutil
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, sanitized_build, skip  # noqa: E402

LAZY = {"libcurl": "curl_easy_", "libarchive": "archive_", "libpng": "png_", "libz": "inflate"}


def lazy_build(binary):
    with open(binary, "rb") as f:
        return b"lazy_libs_resolve" in f.read()


def mapped_paths(pid):
    with open("/proc/%d/maps" % pid) as f:
        return {line.split()[-1] for line in f if ".so" in line.split()[-1]}


def mapped_libraries(pid):
    return {os.path.basename(path) for path in mapped_paths(pid)}


def needed_by(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def test_not_linked_at_startup(binary):
    if not lazy_build(binary):
        skip("this build links the libraries the ordinary way (RELAY_LAZY_LIBS off or not x86-64 Linux)")
    if sanitized_build(binary):
        skip("sanitizer runtimes link every library eagerly (--no-as-needed)")
    if shutil.which("readelf") is None:
        skip("readelf (binutils) is not installed")
    needed = needed_by(binary)
    for lib, prefix in LAZY.items():
        linked = [n for n in needed if n.startswith(lib + ".") or n.startswith(lib + "16.")]
        assert not linked, (
            "%s is linked at startup: a function of it is called that the table in core/src/cli/lazy_libs.c "
            "lacks. Find it with `nm -u core/librelay_core.a | grep ' %s'` and add a LAZY_FN line for it."
            % (linked[0], prefix))


def test_not_loaded_by_a_session_without_them(binary):
    if not lazy_build(binary) or sanitized_build(binary):
        skip("only meaningful for a lazy, unsanitized build")
    if shutil.which("readelf") is None:
        skip("readelf (binutils) is not installed")
    with Relay(binary, env={"MCP_RELAY_BACKEND": "machine-service"}) as r:
        r.initialize()
        r.list_tools()
        assert r.call_tool("relay_status")["isError"] is False
        paths = mapped_paths(r.proc.pid)
        # Plugins may link a library themselves (their own business): those are allowed.
        by_plugins = set()
        for path in paths:
            if "/mcp-relay/plugins/" in path:
                by_plugins.update(needed_by(path))
        loaded = [os.path.basename(p) for p in paths
                  if os.path.basename(p).startswith(("libcurl.", "libarchive.", "libpng", "libz."))]
        unexplained = [n for n in loaded if not any(n.startswith(b) for b in by_plugins)]
        assert not unexplained, (unexplained, sorted(by_plugins))


class Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error":"busy"}')

    def log_message(self, *args):
        pass


def test_curl_loads_on_first_use(binary):
    build = os.environ.get("RELAY_BUILD_DIR") or os.path.dirname(binary)
    plugin = os.path.join(build, "lib", "mcp-relay", "plugins", "machine-service.so")
    if not os.path.exists(plugin):
        skip("the machine-service plugin is not built (%s)" % plugin)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://127.0.0.1:%d" % server.server_address[1]
        with Relay(binary, env={"MCP_RELAY_BACKEND": "machine-service", "MCP_RELAY_URL": url}) as r:
            r.initialize()
            # relay_search asks the machine service (over the core's HTTP, libcurl) for its catalog.
            res = r.call_tool("relay_search", {"name": "chrome"})
            assert res["isError"] is True, res
            assert res["structuredContent"]["error"]["code"] in ("backend-unavailable", "backend-refused"), res
            if lazy_build(binary):
                assert any(n.startswith("libcurl.") for n in mapped_libraries(r.proc.pid))
            assert r.request("ping")["result"] == {}
    finally:
        server.shutdown()


if __name__ == "__main__":
    run_tests(globals())
