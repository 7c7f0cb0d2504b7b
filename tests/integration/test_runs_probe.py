#!/usr/bin/env python3
"""relay_probe with scope "guest" (spec/tools.md §3.2): platform and receiver build, runtimes of the
four languages, the catalog and the snapshot verdict, before and after staging, with its
guest-readiness event (runs_support.py variants)."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from runs_support import events, stage, structured, text_of, variants  # noqa: E402


def test_probe_guest_before_and_after_staging(binary):
    for v in variants(binary):
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            name = g["guest"]
            before = len(v.ops())
            res = r.call_tool("relay_probe", {"scope": "guest", "guest": name})
            assert res["isError"] is False, text_of(res)
            p = structured(res)
            assert p["scope"] == "guest" and p["guest"] == name and p["staged"] is False, p
            plat = p["platform"]
            assert plat["uname"] in ("Linux x86_64", "Linux aarch64"), plat
            assert plat["receiverBuild"] in ("linux-x86_64", "linux-aarch64") and plat["receiverAvailable"] is True
            rt = p["runtimes"]
            assert rt["shell"] == {"command": "exit 0", "ready": True, "code": 0}, rt
            assert rt["javascript"]["command"] == "node --version"
            assert rt["typescript"]["command"] == "tsx --version"
            assert rt["python"]["command"] == "python3 --version"
            for lang in ("javascript", "python"):
                if rt[lang]["ready"]:
                    assert rt[lang]["code"] == 0 and rt[lang]["version"], rt[lang]
                else:
                    assert rt[lang]["diagnostic"], rt[lang]
            if rt["typescript"]["ready"]:
                assert rt["typescript"]["version"], rt
            else:
                assert "tsx" in rt["typescript"]["diagnostic"], rt
            assert p["captureVerified"] is False
            assert set(p["catalog"]) >= {"image", "count", "truncated", "applications"}, p["catalog"]
            assert p["catalog"]["count"] >= len(p["catalog"]["applications"])
            assert len(p["catalog"]["applications"]) <= 200
            assert set(p["snapshots"]) == {"enabled", "capture", "reason"}, p["snapshots"]
            head = text_of(res).split("\n")[0]
            assert head.startswith("Guest probe of %s (%s): receiver build available; shell yes, " % (name, plat["uname"]))
            assert head.endswith("snapshots on") or head.endswith("snapshots off"), head
            # Nothing was pushed or staged by a probe.
            assert not [o for o in v.ops()[before:] if o["op"] in ("push", "pull")]
            assert events(g["evidencePath"], "guest-readiness")
            assert stage(r, name)["isError"] is False
            p = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": name}))
            assert p["staged"] is True and "relay_stage reached" in p["snapshots"]["reason"], p
            # A corrected nodePath is what the probe checks.
            s = structured(stage(r, name, nodePath="/nonexistent/node"))
            assert s["nodePath"] == "/nonexistent/node"
            p = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": name}))
            assert p["runtimes"]["javascript"]["command"] == "/nonexistent/node --version"
            assert p["runtimes"]["javascript"]["ready"] is False and p["runtimes"]["javascript"]["code"] == 127, p


def test_probe_refusals(binary):
    for v in variants(binary, kinds=("shim",)):
        with v.relay() as r:
            r.initialize()
            res = r.call_tool("relay_probe", {"scope": "guest", "guest": "nobody-1"})
            assert structured(res)["error"]["code"] == "unknown-guest", text_of(res)
            res = r.call_tool("relay_probe", {"scope": "guest"})
            assert structured(res)["error"]["code"] == "invalid-input", text_of(res)


def test_probe_without_python(binary):
    if not shutil.which("python3"):
        print("  python3 is missing here, so the ready case is what the other test covers")
    for v in variants(binary, kinds=("shim",)):
        # A PATH without python3, node or tsx: each is reported not ready, with the shell's words.
        bindir = os.path.join(v.root, "minbin")
        os.makedirs(bindir)
        for tool in ("uname", "sh"):
            os.symlink(shutil.which(tool), os.path.join(bindir, tool))
        with v.relay(PATH=bindir) as r:
            r.initialize()
            g = v.acquire(r)
            p = structured(r.call_tool("relay_probe", {"scope": "guest", "guest": g["guest"]}))
            rt = p["runtimes"]
            assert rt["shell"]["ready"] is True, rt
            for lang in ("javascript", "typescript", "python"):
                assert rt[lang]["ready"] is False and rt[lang]["diagnostic"], rt[lang]
            assert rt["python"]["code"] == 127 and "not found" in rt["python"]["diagnostic"], rt


if __name__ == "__main__":
    run_tests(globals())
