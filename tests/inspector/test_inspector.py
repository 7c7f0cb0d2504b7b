#!/usr/bin/env python3
"""The MCP Inspector CLI (npm @modelcontextprotocol/inspector, pinned in package-lock.json)
against the INSTALLED mcp-relay: `cmake --install` of the build into a temporary prefix, which
is then moved (the tree must be relocatable), and the Inspector's --cli mode runs tools/list
and a whole acquire, stage, script, finish loop, one Inspector process (so one server process)
per call, as a one-shot client does.

    python3 test_inspector.py --build-dir build

The loop's calls are separate server processes of one project and so, with no setting, of one
session identity: the guest acquired by the first is taken back by the next ones. Runs `npm ci` here when
node_modules is missing. Exits 0 when every check passes, 1 otherwise."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INSPECTOR = os.path.join(HERE, "node_modules", ".bin", "mcp-inspector")
TOOLS = {"relay_search", "relay_probe", "relay_acquisition_capabilities", "relay_acquire",
         "relay_stage", "relay_script", "relay_image", "relay_extract", "relay_finish",
         "relay_release", "relay_console_resolve", "relay_console_open", "relay_console_cancel",
         "relay_status"}

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures += 1
    return ok


def ensure_inspector():
    if os.path.exists(os.path.join(HERE, "node_modules", "@modelcontextprotocol", "inspector",
                                   "package.json")):
        return True
    if shutil.which("npm") is None:
        print("FAIL npm is not installed: it is needed once to install the Inspector "
              f"(npm ci in {HERE}; Debian: apt-get install nodejs npm)", flush=True)
        return False
    print(f"installing the locked Inspector with npm ci in {HERE}", file=sys.stderr, flush=True)
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, stdout=sys.stderr)
    if r.returncode != 0:
        print(f"FAIL npm ci failed in {HERE}: the npm registry must be reachable once to install "
              "@modelcontextprotocol/inspector (see package-lock.json)", flush=True)
        return False
    return True


class Inspector:
    def __init__(self, binary, env):
        self.binary = binary
        self.env = env

    def run(self, method, tool=None, args=(), timeout=300):
        """One Inspector --cli invocation; returns (exit status, parsed JSON or None, stderr)."""
        cmd = [INSPECTOR, "--cli", self.binary]
        for k, v in self.env.items():
            cmd += ["-e", f"{k}={v}"]
        cmd += ["--method", method]
        if tool:
            cmd += ["--tool-name", tool]
        for a in args:
            cmd += ["--tool-arg", a]
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=self.env["MCP_RELAY_PROJECT"])
        out = p.stdout.decode(errors="replace")
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
        return p.returncode, doc, out + p.stderr.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True, help="the CMake build folder to install")
    a = ap.parse_args()
    if not ensure_inspector():
        return 1

    work = tempfile.mkdtemp(prefix="relay-inspector-")
    try:
        staged = os.path.join(work, "staged")
        r = subprocess.run(["cmake", "--install", a.build_dir, "--prefix", staged],
                           capture_output=True, text=True)
        if not check("cmake --install", r.returncode == 0, r.stdout + r.stderr):
            return 1
        prefix = os.path.join(work, "moved")
        os.rename(staged, prefix)  # relocated: nothing may still point at the staged prefix
        binary = os.path.join(prefix, "bin", "mcp-relay")
        project = os.path.join(work, "project")
        state = os.path.join(work, "state")
        os.makedirs(project)
        os.makedirs(state, mode=0o700)
        # No MCP_RELAY_SESSION: the project's own identity lets each one-shot server
        # take back the guest of the one before (docs/hosts.md, the session identity).
        env = {"MCP_RELAY_PROJECT": project, "MCP_RELAY_STATE_DIR": state}
        # The Inspector gives the server only a few variables of its own environment:
        # a sanitizer build needs its options passed on.
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        insp = Inspector(binary, env)

        code, doc, text = insp.run("tools/list")
        names = {t.get("name") for t in (doc or {}).get("tools", [])}
        check("tools/list lists the fourteen tools", code == 0 and names == TOOLS,
              f"exit {code}, missing {sorted(TOOLS - names)}, extra {sorted(names - TOOLS)}: {text[:2000]}")

        code, doc, text = insp.run("tools/call", "relay_acquire",
                                   ["task=inspector", "image=local", "extractions=[]"])
        sc = (doc or {}).get("structuredContent") or {}
        guest = sc.get("guest")
        if not check("relay_acquire", code == 0 and doc.get("isError") is False and guest,
                     f"exit {code}: {text[:3000]}"):
            return 1

        code, doc, text = insp.run("tools/call", "relay_stage", [f"guest={guest}"])
        sc = (doc or {}).get("structuredContent") or {}
        check("relay_stage (a new server process takes the guest back)",
              code == 0 and doc.get("isError") is False and sc.get("staged") is True,
              f"exit {code}: {text[:3000]}")

        marker = "hello from the inspector"
        code, doc, text = insp.run("tools/call", "relay_script",
                                   [f"guest={guest}", "language=shell", "inline=true",
                                    f"code=echo '{marker}'; uname -s"])
        sc = (doc or {}).get("structuredContent") or {}
        check("relay_script runs in the guest and records it",
              code == 0 and doc.get("isError") is False and sc.get("stdout") == f"{marker}\nLinux\n"
              and sc.get("executionFailed") is False, f"exit {code}: {text[:3000]}")

        code, doc, text = insp.run("tools/call", "relay_finish", [f"guest={guest}"])
        sc = (doc or {}).get("structuredContent") or {}
        evidence = sc.get("evidencePath") or ""
        check("relay_finish delivers verified evidence and releases the guest",
              code == 0 and doc.get("isError") is False and sc.get("delivered") is True
              and sc.get("deliveryVerified") is True and sc.get("released") is True
              and sc.get("execution") == "passed", f"exit {code}: {text[:3000]}")
        check("the evidence package is in the project folder with its manifest",
              evidence.startswith(project + os.sep)
              and os.path.isfile(os.path.join(evidence, "manifest.json")), evidence)
        if evidence:
            r = subprocess.run([binary, "review", evidence], capture_output=True, text=True)
            check("mcp-relay review verifies the package", r.returncode == 0, r.stdout[-2000:] + r.stderr)

        code, doc, text = insp.run("tools/call", "relay_status")
        sc = (doc or {}).get("structuredContent") or {}
        check("relay_status: no guest held afterwards", code == 0 and sc.get("guests") == [],
              f"exit {code}: {text[:2000]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED' if failures else 'OK'}: inspector test, {failures} failure(s)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
