"""A whole session over the service-mediated transport: relay_acquire, relay_stage,
relay_script and relay_finish through the real mcp-relay binary on machine-service, against the
stand-in (whose exec, push and pull run in a per-lease folder, and whose fake cua-driver makes
snapshots). Every byte travels through POST /machines/<vm>/exec, /push and /pull; pulls are
staged in the plugin's transfer-tmp folder and nothing is left there."""

import glob
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests, skip  # noqa: E402
from service_support import Standin, build_dir, structured, text  # noqa: E402


def receiver_built(binary):
    machine = platform.machine()
    key = "linux-x86_64" if machine in ("x86_64", "AMD64") else "linux-aarch64" if machine in ("aarch64", "arm64") \
        else "linux-" + machine
    return os.path.exists(os.path.join(build_dir(binary), "libexec", "mcp-relay", "receivers", key, "receiver"))


def test_stage_script_finish_through_the_service(binary):
    if not receiver_built(binary):
        skip("the guest receiver is not built for this platform (cmake --build build --target receiver)")
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            acq = r.call_tool("relay_acquire", {"task": "sess", "image": "ubuntu2404",
                                                "extractions": [{"name": "result", "path": "out/result.txt"}]})
            assert acq["isError"] is False, text(acq)
            vm = structured(acq)["vm"]
            ws = os.path.join(r.project, "ws")
            os.makedirs(os.path.join(ws, "sub"))
            with open(os.path.join(ws, "sub", "hello.txt"), "w") as f:
                f.write("hello from the host\n")
            res = r.call_tool("relay_stage", {"guest": "sess-1", "workspace": "ws"}, timeout=300)
            assert res["isError"] is False, text(res)
            assert structured(res)["workspaceFiles"]["count"] == 1
            res = r.call_tool("relay_script", {"guest": "sess-1", "language": "shell", "inline": True,
                                               "code": "mkdir -p out && cat sub/hello.txt > out/result.txt"},
                              timeout=300)
            assert res["isError"] is False, text(res)
            assert structured(res)["outcome"]["kind"] == "completed"
            res = r.call_tool("relay_finish", {"guest": "sess-1"}, timeout=300)
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["delivered"] is True and s["destructionVerified"] is True
            pulled = glob.glob(os.path.join(s["evidencePath"], "extractions", "result", "**", "result.txt"),
                               recursive=True)
            assert pulled, s
            with open(pulled[0]) as f:
                assert f.read() == "hello from the host\n"
            prefix = "/machines/%s/" % vm
            used = {e["path"][len(prefix):] for e in svc.requests("POST", prefix=prefix)}
            assert {"exec", "push", "pull", "release"} <= used, used
            # Pulls were staged in the plugin's own folder and nothing was left behind.
            tmp = os.path.join(r.state_dir, "plugins", "machine-service", "transfer-tmp")
            assert os.path.isdir(tmp) and os.listdir(tmp) == []
            assert oct(os.stat(tmp).st_mode & 0o777) == oct(0o700)
            assert vm not in svc.machines()
    finally:
        svc.cleanup()


if __name__ == "__main__":
    run_tests(globals())
