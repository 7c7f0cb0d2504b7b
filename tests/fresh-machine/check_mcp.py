#!/usr/bin/env python3
"""check_mcp.py ROOT COMMAND: start COMMAND inside the Debian root ROOT (through in-root)
and talk MCP to it: initialize, tools/list (the fourteen relay_* tools), relay_status.

    check_mcp.py --root /var/tmp/x/root --startup-timeout 1800 'scripts/build && build/mcp-relay'

COMMAND runs under /bin/sh in /src (when present) inside the root. Its standard output must
be the MCP stream from the first byte (README command 1 sends every build line to standard
error), so the initialize request written at once is answered when the server starts, after
the build. Standard error goes to --log (default: inherited). Exits 0 when every answer is
right, 1 with the reason otherwise."""

import argparse
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from relay_client import Relay  # noqa: E402

TOOLS = {"relay_search", "relay_probe", "relay_acquisition_capabilities", "relay_acquire",
         "relay_stage", "relay_script", "relay_image", "relay_extract", "relay_finish",
         "relay_release", "relay_console_resolve", "relay_console_open", "relay_console_cancel",
         "relay_status"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--startup-timeout", type=float, default=1800,
                    help="seconds to wait for the initialize answer (the build runs first)")
    ap.add_argument("--log", help="file for the command's standard error")
    ap.add_argument("command")
    a = ap.parse_args()

    in_root = os.path.join(HERE, "in-root")
    # relay_client points the state and project folders at host paths; inside the root
    # the defaults apply (HOME=/root, the working folder /src), so pass none.
    # Its own process group: on failure the whole command (a build, apt-get) is stopped.
    relay = Relay(in_root, args=[a.root, "/bin/sh", "-c", a.command], cwd=HERE,
                  env={"MCP_RELAY_STATE_DIR": None, "MCP_RELAY_PROJECT": None},
                  preexec_fn=os.setsid)
    failures = []
    try:
        resp = relay.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "fresh-machine", "version": "1"}}, timeout=a.startup_timeout)
        if "result" not in resp:
            raise AssertionError(f"initialize failed: {resp}")
        init = resp["result"]
        relay.notify("notifications/initialized")
        if init.get("serverInfo", {}).get("name") != "relay":
            failures.append(f"serverInfo is {init.get('serverInfo')!r}, expected name relay")
        if "tools" not in init.get("capabilities", {}):
            failures.append(f"capabilities lack tools: {init.get('capabilities')!r}")
        print(f"initialize: {init['serverInfo']} protocol {init.get('protocolVersion')}",
              file=sys.stderr)

        tools = relay.list_tools()
        names = {t["name"] for t in tools.get("tools", [])}
        if names != TOOLS:
            failures.append(f"tools/list: missing {sorted(TOOLS - names)}, "
                            f"unexpected {sorted(names - TOOLS)}")
        print(f"tools/list: {len(names)} tools", file=sys.stderr)

        status = relay.call_tool("relay_status", {}, timeout=120)
        sc = status.get("structuredContent") or {}
        if status.get("isError") is not False:
            failures.append(f"relay_status is an error: {json.dumps(status)[:2000]}")
        elif sc.get("backend", {}).get("machine") != "machine-local":
            failures.append(f"relay_status backend is {sc.get('backend')!r}, expected machine-local")
        elif sc.get("active") is not False or sc.get("guests") != []:
            failures.append(f"relay_status of a new session holds guests: {sc!r}")
        print(f"relay_status: backend {sc.get('backend')}, project {sc.get('project')}",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - any failure is reported with the server's stderr
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        relay.close_stdin()
        try:
            code = relay.wait(timeout=5 if failures else 120)
            if not failures and code != 0:
                failures.append(f"the server exited with status {code} at end of input")
        except Exception:  # noqa: BLE001
            if not failures:
                failures.append("the server did not exit within 120 s of the end of its input")
        try:
            os.killpg(relay.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        with open(relay.stderr_path, "rb") as f:
            stderr = f.read()
        relay.close()
    if a.log:
        with open(a.log, "wb") as f:
            f.write(stderr)
    if failures:
        print("fresh-machine MCP check FAILED:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        print("--- the command's standard error (last 60 lines) ---", file=sys.stderr)
        print(b"\n".join(stderr.splitlines()[-60:]).decode(errors="replace"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
