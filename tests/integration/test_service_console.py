"""Console tools through the real mcp-relay binary on machine-service with console-vnc, against
the stand-in started with --vnc linux: acquisition capabilities, relay_acquire with vnc (step 6:
the OS's backend must be available; step 14: a ready console and lease identity), resolve, open
(only on an explicit request, never replayed, one active attempt, reused ids refused) and cancel
(never releases the guest); an open whose answer never arrives stays uncertain."""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests, skip  # noqa: E402
from service_support import Standin, error_code, plugin_dir, structured, text  # noqa: E402

VNC = {"task": "vnc", "image": "ubuntu2404", "extractions": [], "vnc": True}


def need_console_plugin(binary):
    if not os.path.exists(os.path.join(plugin_dir(binary), "console-vnc.so")):
        skip("console-vnc.so is not built in %s (build the console-vnc target)" % plugin_dir(binary))


def open_args(console_id, attempt_id, **extra):
    args = {"guest": "vnc-1", "console_id": console_id, "attempt_id": attempt_id, "userRequested": True,
            "reason": "the user asked to watch the login test", "expected": "the GNOME desktop"}
    args.update(extra)
    return args


def console_requests(svc, vm, op):
    return svc.requests("POST", "/machines/%s/console/%s" % (vm, op))


def test_capabilities_and_acquisition(binary):
    need_console_plugin(binary)
    svc = Standin(binary, ["--vnc", "linux"])
    try:
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_acquisition_capabilities", {})
            assert res["isError"] is False, text(res)
            s = structured(res)
            linux = s["options"]["vnc"]["backends"]["linux"]
            assert linux["available"] is True and linux["backend"] == "x11vnc-inetd"
            assert linux["server_enforced_view_only"] is True
            assert list(linux) == ["available", "status", "backend", "viewer_location", "authentication",
                                   "guest_readiness", "session_binding", "server_enforced_view_only", "pixels",
                                   "human_confirmation"]
            assert text(res).splitlines()[0] == "VNC console sharing: linux available, macos unavailable"
            # macOS has no VNC backend: refused before any acquisition is attempted.
            res = r.call_tool("relay_acquire", dict(VNC, image="macos26", task="mac"))
            assert error_code(res) == "console-unavailable", text(res)
            assert "VNC backend unavailable for this image OS; ordinary acquisition was not attempted" in text(res)
            assert svc.requests("POST", "/acquire") == []
            # Linux: a ready console comes with the lease.
            res = r.call_tool("relay_acquire", VNC)
            assert res["isError"] is False, text(res)
            console = structured(res)["console"]
            assert console["status"] == "ready" and len(console["console_id"]) == 32
            assert console["observed_at"].endswith("Z") and console["attempt"] is None
            body = json.loads(svc.requests("POST", "/acquire")[0]["body"])
            assert body["vnc"] is True
            # A guest acquired without vnc never gets a console.
            plain = r.call_tool("relay_acquire", {"task": "plain", "image": "ubuntu2404", "extractions": []})
            assert plain["isError"] is False
            res = r.call_tool("relay_console_resolve", {"guest": "plain-1"})
            assert error_code(res) == "console-unavailable", text(res)
            assert "acquired without a console" in text(res)
    finally:
        svc.cleanup()


def test_resolve_open_cancel(binary):
    need_console_plugin(binary)
    svc = Standin(binary, ["--vnc", "linux"])
    try:
        with svc.relay(binary) as r:
            r.initialize()
            acq = structured(r.call_tool("relay_acquire", VNC))
            vm, console_id = acq["vm"], acq["console"]["console_id"]

            res = r.call_tool("relay_console_resolve", {"guest": "vnc-1"})
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["guest"] == "vnc-1" and s["vm"] == vm and s["lease_id"] == acq["lease_id"]
            assert s["status"] == "ready" and s["screenshotEvidence"] is False and s["leaseReleased"] is False
            assert s["viewer_connected"] == "unverified" and s["pixels"] == "unverified"
            assert text(res).splitlines()[0] == "Console of vnc-1: ready (no reason given)"
            assert json.loads(console_requests(svc, vm, "resolve")[0]["body"]) == {"lease_id": acq["lease_id"]}

            # Opening needs an explicit user request.
            res = r.call_tool("relay_console_open", open_args(console_id, "a1", userRequested=False))
            assert error_code(res) == "invalid-input", text(res)
            res = r.call_tool("relay_console_open", open_args("0" * 32, "a1"))
            assert error_code(res) == "console-identity-mismatch", text(res)
            assert console_requests(svc, vm, "open") == []

            res = r.call_tool("relay_console_open", open_args(console_id, "a1"))
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["attempt"]["attempt_id"] == "a1" and s["attempt"]["status"] == "launched"
            assert s["attempt"]["transport_connected"] is False
            assert text(res).splitlines()[0] == "Console viewing attempt a1 on vnc-1: launched"
            assert json.loads(console_requests(svc, vm, "open")[0]["body"]) == {
                "lease_id": acq["lease_id"], "console_id": console_id, "attempt_id": "a1"}
            # The same attempt id answers the current attempt; nothing is sent.
            res = r.call_tool("relay_console_open", open_args(console_id, "a1"))
            assert res["isError"] is False and structured(res)["replayed"] is False, text(res)
            assert len(console_requests(svc, vm, "open")) == 1
            # Another attempt while a1 is active.
            res = r.call_tool("relay_console_open", open_args(console_id, "a2"))
            assert error_code(res) == "console-attempt-active", text(res)
            # Cancel: the attempt ends, the guest is kept.
            res = r.call_tool("relay_console_cancel", {"guest": "vnc-1", "console_id": console_id, "attempt_id": "a1"})
            assert res["isError"] is False, text(res)
            assert structured(res)["attempt"]["status"] == "cancelled"
            assert vm in svc.machines()
            assert svc.requests("POST", "/machines/%s/release" % vm) == []
            # Cancel must name the current, open attempt.
            res = r.call_tool("relay_console_cancel", {"guest": "vnc-1", "console_id": console_id, "attempt_id": "a1"})
            assert error_code(res) == "console-attempt-active", text(res)
            # A fresh id opens again; the old one is never replayed.
            assert r.call_tool("relay_console_open", open_args(console_id, "a2"))["isError"] is False
            res = r.call_tool("relay_console_open", open_args(console_id, "a1"))
            assert error_code(res) == "console-attempt-reused", text(res)
            assert r.call_tool("relay_console_cancel", {"guest": "vnc-1", "console_id": console_id,
                                                        "attempt_id": "a2"})["isError"] is False

            records = glob.glob(os.path.join(r.state_dir, "*", "guests", "vnc-1", "lease.json"))
            with open(records[0]) as f:
                record = json.load(f)
            assert record["consoleAttemptIds"][:2] == ["a1", "a2"]
            # The intent was recorded with the reason and what to expect.
            events = glob.glob(os.path.join(r.project, "relay-evidence", acq["purpose"], "host", "events", "*.json"))
            intents = []
            for path in events:
                with open(path) as f:
                    e = json.load(f)
                if e["kind"] == "console-open-intent":
                    intents.append(e)
            assert len(intents) == 2
            assert intents[0]["details"]["expected"] == "the GNOME desktop"
    finally:
        svc.cleanup()


def test_an_uncertain_open_is_kept_and_settled_by_cancel(binary):
    need_console_plugin(binary)
    svc = Standin(binary, ["--vnc", "linux"])
    try:
        with svc.relay(binary) as r:
            r.initialize()
            acq = structured(r.call_tool("relay_acquire", VNC))
            vm, console_id = acq["vm"], acq["console"]["console_id"]
            # The resolve inside relay_console_open is answered; the open runs at the
            # service but its answer is dropped.
            svc.fault({"route": "console", "times": 1})
            svc.fault({"route": "console", "dropConnection": True, "phase": "after", "times": 1})
            res = r.call_tool("relay_console_open", open_args(console_id, "a1"))
            assert error_code(res) == "outcome-unknown", text(res)
            assert ("console open outcome unknown; ownership kept; resolve or cancel attempt a1; opening is "
                    "never replayed automatically") in text(res)
            assert len(console_requests(svc, vm, "open")) == 1
            g = structured(r.call_tool("relay_status"))["guests"][0]
            assert g["consoleAttempt"]["attempt_id"] == "a1" and g["consoleAttempt"]["status"] == "uncertain"
            # A new attempt waits until this one is settled.
            res = r.call_tool("relay_console_open", open_args(console_id, "a2"))
            assert error_code(res) == "console-attempt-active", text(res)
            # Resolve settles what the service did: it launched a1.
            res = r.call_tool("relay_console_resolve", {"guest": "vnc-1"})
            assert res["isError"] is False, text(res)
            assert structured(res)["attempt"]["status"] == "launched"
            assert text(res).splitlines()[0] == "Console of vnc-1: ready (no reason given); attempt a1 launched"
            # Cancel ends it; the guest is never released by a console call.
            res = r.call_tool("relay_console_cancel", {"guest": "vnc-1", "console_id": console_id, "attempt_id": "a1"})
            assert res["isError"] is False, text(res)
            assert structured(res)["attempt"]["status"] == "cancelled"
            assert vm in svc.machines()
            assert len(console_requests(svc, vm, "open")) == 1
            # A cancel whose answer never arrives is uncertain too, and the lease is untouched.
            assert r.call_tool("relay_console_open", open_args(console_id, "a2"))["isError"] is False
            svc.fault({"route": "console", "times": 1})
            svc.fault({"route": "console", "status": 500, "times": 1, "error": "secret detail"})
            res = r.call_tool("relay_console_cancel", {"guest": "vnc-1", "console_id": console_id, "attempt_id": "a2"})
            assert error_code(res) == "outcome-unknown", text(res)
            assert "console cancel outcome unknown" in text(res) and "secret detail" not in text(res)
            assert vm in svc.machines()
    finally:
        svc.cleanup()


if __name__ == "__main__":
    run_tests(globals())
