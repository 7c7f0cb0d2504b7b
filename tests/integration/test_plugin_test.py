#!/usr/bin/env python3
"""`mcp-relay plugin-test --kind KIND plugin.so` (issue 15 point 5, the hard half checks 60-67 of
issue 26.4 with tests/plugins/machine-faultshim): every shipped plugin passes every check that can
run here (machine-local, reference-machine, transfer-ssh
against a real sshd, machine-service against its stand-in, machine-docker against Podman,
the capture and console plugins), and each broken backend of tests/abi/broken_backend.c fails
exactly the check of the rule it breaks, with that check's message."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from support_common import build_dir, namespaces_missing, plugin_so  # noqa: E402


def plugin_test(binary, kind, path, *extra, timeout=600, env=None):
    p = subprocess.run([binary, "plugin-test", "--kind", kind] + list(extra) + [path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=tempfile.gettempdir(),
                       env=dict(os.environ, **env) if env else None)
    return p.returncode, p.stdout, p.stderr


def results(out):
    """{check number: (status, message or None)} from the runner's lines."""
    found, last = {}, None
    for line in out.splitlines():
        m = re.match(r"check +(\d+) (ok  |FAIL|skip) (.*)$", line)
        if m:
            last = int(m.group(1))
            found[last] = [m.group(2).strip(), None]
        elif line.startswith("     ") and last is not None:
            found[last][1] = line.strip()
    return found


def passes(binary, kind, path, *extra, need=(), env=None):
    """The plugin passes: exit 0, no FAIL, and the checks `need` ran."""
    code, out, err = plugin_test(binary, kind, path, *extra, env=env)
    assert code == 0 and "FAIL" not in out, (path, kind, out, err)
    r = results(out)
    for n in need:
        assert r.get(n, ["missing"])[0] == "ok", (n, path, out)
    assert out.rstrip().endswith("0 failed, %d skipped." % sum(1 for v in r.values() if v[0] == "skip")), out
    print("  %s --kind %s: %s" % (os.path.basename(path), kind, out.splitlines()[-1]), flush=True)
    return r


LEASE = list(range(10, 19))
TRANSPORT = [20, 21, 22, 23, 24, 25, 26, 27, 30, 31, 32, 33, 34, 35, 36]
STREAM = [50, 51, 52, 53, 54]  # the long-lived stream (RELAY_TRANSPORT_STREAM, spec/guest.md §17)
# The hard half (issue 26.4): cancellation of exec, push and pull through a real call, inspect and
# renew beside a long exec, two execs at once; a restart adopting the lease.
HARD = [60, 61, 62, 63, 64]
# Push and pull cancelled while they move bytes (checks 68, 69): required of the plugins that poll
# host->call_cancelled per chunk (reference-machine, machine-local, and the shim over them); the
# others skip them when their transfer runs to its end.
MID = [68, 69]
RESTART = [65]
# A fault script for tests/plugins/machine-faultshim: the runner's acquire for a purpose with
# "-indeterminate-" acquires and loses its answer, its first release of "-retry-" fails.
FAULTS = [{"op": "acquire", "match": "-indeterminate-", "fault": "drop"},
          {"op": "release", "match": "-retry-", "nth": 1, "fault": "fail", "code": "unavailable"}]


def test_capture_and_console_plugins(binary):
    for kind, name in (("capture", "capture-x11"), ("capture", "capture-cua"), ("capture", "capture-reference"),
                       ("console", "console-vnc")):
        path = plugin_so(binary, name)
        if not os.path.exists(path):
            skip("%s is not built" % path)
        passes(binary, kind, path, need=[1, 2, 3, 4, 5, 6, 40 if kind == "capture" else 45])


def test_reference_machine(binary):
    path = plugin_so(binary, "reference-machine")
    passes(binary, "machine", path, need=[1, 2, 3, 4, 5, 6] + LEASE + RESTART)
    passes(binary, "transport", path, need=TRANSPORT + HARD + MID)
    # Its options name the guests' folder.
    root = tempfile.mkdtemp(prefix="relay-pt-root-")
    passes(binary, "machine", path, "--options", json.dumps({"root": root}), need=LEASE)
    assert os.listdir(root) == [], os.listdir(root)  # released guests leave nothing


def test_machine_local(binary):
    why = namespaces_missing()
    if why:
        skip(why)
    path = plugin_so(binary, "machine-local")
    passes(binary, "machine", path, need=LEASE[:4] + LEASE[5:] + RESTART + [46])
    passes(binary, "transport", path, need=TRANSPORT + STREAM + HARD + MID)


def test_transfer_ssh_against_sshd(binary):
    import runs_support
    v, why = runs_support.make_variant(binary, "ssh")
    if v is None:
        skip(why)
    with v:
        ssh = json.load(open(v.control))["leaseExtra"]["ssh"]
        lease = os.path.join(v.root, "lease.json")
        with open(lease, "w") as f:
            json.dump({"vm": "sshd-fixture", "purpose": "relay-plugin-test-ssh", "image": "none", "state": "running",
                       "lease_id": None, "expiresAtMs": None, "console": None, "display": None, "ssh": ssh,
                       "record": {}}, f)
        passes(binary, "transport", plugin_so(binary, "transfer-ssh"), "--lease", lease, need=TRANSPORT + STREAM)


def test_machine_service_against_standin(binary):
    import service_support
    s = service_support.Standin(binary)
    try:
        opts = json.dumps({"destructionCheck": "service"})
        path = plugin_so(binary, "machine-service")
        passes(binary, "machine", path, "--service-url", s.url, "--options", opts, need=[10, 11, 12, 13, 15, 16, 46])
        # Its transport: the service joins stdout and stderr (RELAY_TRANSPORT_MERGED_OUTPUT), and its
        # exec has no cancellation (spec/machine-service.md §3.7: a dropped request leaves the command
        # running), which it declares (RELAY_TRANSPORT_EXEC_UNCANCELLABLE): check 60 fails with the
        # message naming that capability. Everything else passes.
        code, out, err = plugin_test(binary, "transport", path, "--service-url", s.url, "--options", opts)
        r = results(out)
        assert code == 1, (code, out)
        assert {n for n, v in r.items() if v[0] == "FAIL"} == {60}, out
        assert r[60][1] == ("exec cannot be cancelled: the transport declares RELAY_TRANSPORT_EXEC_UNCANCELLABLE, "
                            "and its cancelled exec answered RELAY_E_CANCELLED while the command ran on and wrote "
                            "its marker 3 s in; the check passes only for a transport that stops a running command "
                            "on cancellation"), r[60]
        for n in TRANSPORT + HARD[1:4]:
            assert r[n][0] == "ok", (n, out)
    finally:
        s.stop()


def test_machine_docker_against_podman(binary):
    import docker_support
    why = docker_support.plugin_missing(binary) or docker_support.engine_missing()
    if why:
        skip(why)
    with docker_support.Engine() as eng:
        opts = {"endpoint": eng.endpoint, "images": {"minimal": eng.image("minimal")}}
        if eng.runtime:
            opts["runtime"] = eng.runtime
        path = plugin_so(binary, "machine-docker")
        passes(binary, "machine", path, "--options", json.dumps(opts), "--image", "minimal",
               need=[10, 11, 12, 15, 46])
        passes(binary, "transport", path, "--options", json.dumps(opts), "--image", "minimal",
               need=[20, 21, 30] + STREAM)
        # The same fault script as over reference-machine and machine-local (issue 26.4).
        if os.path.exists(faultshim_so(binary)):
            one_fault_script(binary, path, opts, "--image", "minimal")
            # Its attached exec stream through the shim (the traits read from the plugin named).
            passes(binary, "transport", faultshim_so(binary), "--options", shim_options(path, [], opts),
                   "--image", "minimal", need=[20, 21, 30] + STREAM, env={"MCP_RELAY_FAULTSHIM_PLUGIN": path})


# Each broken backend: the checks that must fail, and the first words of the message.
BROKEN = {
    "table-size": {2: "the transport ops table says struct_size 88 but the descriptor says transport_ops_size 80"},
    "flags": {3: "transport exec answered RELAY_OK to the unknown flag bit 0x40000000"},
    "error": {4: "machine inspect failed with RELAY_E_UNSUPPORTED_FLAGS but its error record holds code 0"},
    "out-param": {5: "machine images failed but left a value in its out-parameter"},
    "leak": {6: "1 blocks allocated with host->alloc were not freed with host->free by the end of fini()"},
    "release": {16: "verify_destroyed after release answered RELAY_E_UNVERIFIED",
                17: "inspect after release answered a lease still \"running\""},
    "exec-rules": {22: "exec with envp {RELAY_PT_ADDED=yes} did not run with that entry added",
                   24: "exec of 3000 bytes on stdout and 3000 on stderr under max_output_bytes 4096 kept 3000 + 3000"},
    "result-size": {27: "exec with a relay_exec_result of struct_size 40 failed (it wrote past the size)"},
    "facts": {32: "push of a tree: a fact's path is not the file's path relative to the transferred root"},
    "links": {34: "pull of a path holding a symbolic link answered RELAY_OK"},
    "cancel": {60: "exec of sleep 3 whose call was cancelled after 500 ms answered RELAY_OK (it ran to its end)",
               61: "push of 1 MiB with a call cancelled as it began answered RELAY_OK",
               62: "pull of 1 MiB with a call cancelled as it began answered RELAY_OK"},
    "console": {46: "the machine console's open with the attempt id \"bad id!\" answered RELAY_OK: refuse an "
                    "invalid attempt id before launching anything"},
}


def faultshim_so(binary):
    return os.path.join(build_dir(binary), "tests", "plugins", "machine-faultshim.so")


def shim_options(inner, faults, inner_options=None):
    return json.dumps({"plugin": inner, "faults": faults, "options": inner_options or {}})


def one_fault_script(binary, inner, inner_options=None, *extra):
    """FAULTS over `inner`: the retried release (66) and the reconciled indeterminate acquire (67)
    run and pass, and so does everything else; without faults both say why they were skipped."""
    shim = faultshim_so(binary)
    r = passes(binary, "machine", shim, "--options", shim_options(inner, FAULTS, inner_options), *extra,
               need=LEASE[:4] + RESTART + [66, 67])
    assert r[16][0] == "ok", r
    # The other way to lose an outcome: acquire fails as "may have happened" before the backend
    # saw it (nothing to find), and the first release's answer is lost after it destroyed the
    # guest (the retry meets a lease already gone).
    other = [{"op": "acquire", "match": "-indeterminate-", "fault": "fail", "code": "outcome indeterminate"},
             {"op": "release", "match": "-retry-", "nth": 1, "fault": "drop"}]
    passes(binary, "machine", shim, "--options", shim_options(inner, other, inner_options), *extra, need=[66, 67])
    r = passes(binary, "machine", inner, *(["--options", json.dumps(inner_options)] if inner_options else []),
               *extra)
    assert r[66][0] == "skip" and r[67][0] == "skip", r


def test_faultshim_over_reference_machine(binary):
    if not os.path.exists(faultshim_so(binary)):
        skip("machine-faultshim.so is not built")
    inner = plugin_so(binary, "reference-machine")
    root = tempfile.mkdtemp(prefix="relay-pt-shim-")
    one_fault_script(binary, inner, {"root": root})
    assert os.listdir(root) == [], os.listdir(root)  # the reconciled and retried leases are gone
    # Its transport through the shim: the hard checks hold (the shim says no concurrency trait).
    r = passes(binary, "transport", faultshim_so(binary), "--options", shim_options(inner, []),
               need=TRANSPORT + HARD[:4] + MID)
    assert r[64][0] == "skip", r


def test_faultshim_over_machine_local(binary):
    why = namespaces_missing()
    if why:
        skip(why)
    if not os.path.exists(faultshim_so(binary)):
        skip("machine-faultshim.so is not built")
    local = plugin_so(binary, "machine-local")
    one_fault_script(binary, local)
    # Its transport through the shim, the traits read from the plugin MCP_RELAY_FAULTSHIM_PLUGIN
    # names: the stream checks run over the shim's forwarded stream, and so does all the rest.
    passes(binary, "transport", faultshim_so(binary), "--options", shim_options(local, []),
           need=TRANSPORT + STREAM + HARD + MID, env={"MCP_RELAY_FAULTSHIM_PLUGIN": local})


def test_core_adopts_an_indeterminate_acquire_through_the_shim(binary):
    """The shim as the relay's backend over reference-machine (MCP_RELAY_BACKEND): the answer of
    the session's acquire is lost after the guest was made; relay_acquire still answers the guest,
    reconciled by purpose, and relay_release releases it (its folder is gone)."""
    from relay_client import Relay
    if not os.path.exists(faultshim_so(binary)):
        skip("machine-faultshim.so is not built")
    env = {"MCP_RELAY_BACKEND": faultshim_so(binary),
           "MCP_RELAY_FAULTSHIM_PLUGIN": plugin_so(binary, "reference-machine"),
           "MCP_RELAY_FAULTSHIM_FAULTS": json.dumps([{"op": "acquire", "nth": 1, "fault": "drop"}])}
    with Relay(binary, env=env) as r:
        r.initialize()
        acq = r.call_tool("relay_acquire", {"task": "shim", "image": "folder", "extractions": []}, timeout=120)
        got = acq.get("structuredContent") or {}
        assert got.get("vm", "").startswith("ref-"), acq
        assert "fault script: the answer of acquire is dropped" in r.stderr_text(), r.stderr_text()
        store = r.call_tool("relay_status", {}, timeout=60)["structuredContent"]["guests"][0]["binding"]["store"]
        assert os.listdir(store) == [got["vm"]], os.listdir(store)  # one guest, the adopted one
        fin = r.call_tool("relay_release", {"guest": got["guest"]}, timeout=300)
        assert not fin.get("isError"), fin
        assert os.listdir(store) == [], os.listdir(store)


def test_checks_66_and_67_fail_when_recovery_does(binary):
    """A release that keeps failing and a find_by_purpose that fails after an indeterminate
    acquire: each recovery check fails with its message."""
    if not os.path.exists(faultshim_so(binary)):
        skip("machine-faultshim.so is not built")
    inner = plugin_so(binary, "reference-machine")
    faults = [{"op": "release", "match": "-retry-", "fault": "fail", "code": "unavailable"},
              {"op": "acquire", "match": "-indeterminate-", "fault": "drop"},
              {"op": "find_by_purpose", "match": "-indeterminate-", "fault": "fail", "code": "unavailable"}]
    code, out, err = plugin_test(binary, "machine", faultshim_so(binary), "--options", shim_options(inner, faults))
    assert code == 1, (out, err)
    r = results(out)
    assert {n for n, v in r.items() if v[0] == "FAIL"} == {66, 67}, out
    assert r[66][1].startswith("release after a failed release (RELAY_E_UNAVAILABLE: machine-faultshim: "
                               "release failed by the fault script (unavailable)) answered RELAY_E_UNAVAILABLE 3 times"), r[66]
    assert r[67][1].startswith("find_by_purpose after an indeterminate acquire answered: machine-faultshim: "
                               "find_by_purpose failed"), r[67]


def test_each_broken_backend_fails_its_check(binary):
    abi = os.path.join(build_dir(binary), "tests", "abi")
    for name, want in BROKEN.items():
        path = os.path.join(abi, "broken-backend-%s.so" % name)
        code, out, err = plugin_test(binary, "transport", path)
        assert code == 1, (name, code, out, err)
        r = results(out)
        failed = {n for n, v in r.items() if v[0] == "FAIL"}
        assert failed == set(want), (name, failed, out)
        for n, words in want.items():
            assert r[n][1].startswith(words), (name, n, r[n][1])
        print("  broken-backend-%s: fails %s" % (name, sorted(failed)), flush=True)


def test_loader_refusal_is_check_1(binary):
    path = os.path.join(build_dir(binary), "tests", "abi", "abi-missing-op.so")
    code, out, _ = plugin_test(binary, "machine", path)
    assert code == 1, out
    r = results(out)
    assert r[1][0] == "FAIL" and r[1][1].startswith("the loader refused the plugin: plugin abi-broken"), out
    assert "lacks the required machine operation release" in r[1][1], out
    assert set(r) == {1}, out


def test_usage_errors(binary):
    for args in ([], ["--kind", "machine"], ["--kind", "nonsense", "x.so"], ["--kind"]):
        p = subprocess.run([binary, "plugin-test"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 2 and p.stdout == "", (args, p.returncode, p.stdout)
        assert "plugin-test" in p.stderr, p.stderr


if __name__ == "__main__":
    run_tests(globals())
