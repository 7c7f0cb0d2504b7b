"""relay_search, relay_probe (host), relay_acquisition_capabilities and relay_acquire /
relay_release through the real mcp-relay binary on the machine-service backend, against the
real machine-service-standin. Assertions read the tool results, the stand-in's request log and
files on disk."""

import glob
import json
import os
import time
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import Relay, run_tests  # noqa: E402
from service_support import Standin, error_code, plugin_dir, structured, text  # noqa: E402

ACQUIRE = {"task": "svc", "image": "ubuntu2404", "extractions": []}


def test_search_matches_names_and_aliases(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_search", {"name": "  CUA  "})
            assert res["isError"] is False, text(res)
            s = structured(res)
            names = [a["name"] for a in s["applications"]]
            # cua-driver (linux) and CuaDriver (macOS, alias cua-driver) both match by prefix.
            assert names == ["cua-driver", "CuaDriver"], s
            assert s["truncated"] is False
            inst = s["applications"][0]["installations"][0]
            assert set(inst) == {"image", "version", "os", "architecture"}
            assert inst["image"] == "ubuntu2404" and inst["os"] == "linux"
            assert text(res).startswith('Found 2 application(s) with 2 installation(s) matching "CUA"')

            res = r.call_tool("relay_search", {"name": "cua-driver", "os": "macos"})
            s = structured(res)
            assert [a["name"] for a in s["applications"]] == ["CuaDriver"], s
            assert " on macos" in text(res).splitlines()[0]

            res = r.call_tool("relay_search", {"name": "no such thing"})
            assert res["isError"] is False
            assert structured(res) == {"applications": [], "truncated": False}
            assert text(res).splitlines()[0] == 'No installed application matches "no such thing"'

            # Every search leaves a record under search-diagnostics/.
            records = glob.glob(os.path.join(r.state_dir, "*", "search-diagnostics", "*.json"))
            assert len(records) == 3, records
            with open(sorted(records)[-1]) as f:
                rec = json.load(f)
            assert rec["query"]["name"] == "no such thing" and rec["outcome"] == "ok"
            assert len(rec["resultSha256"]) == 64
            # Searching never leases anything.
            assert svc.requests("POST", "/acquire") == []
            assert len(svc.requests("GET", "/applications")) == 3
    finally:
        svc.cleanup()


def test_search_diagnostics_are_pruned(binary):
    """spec/lifecycle.md §9: search-diagnostics keeps at most 256 records and none older than 30 days."""
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            assert r.call_tool("relay_search", {"name": "cua"})["isError"] is False
            records = glob.glob(os.path.join(r.state_dir, "*", "search-diagnostics", "*.json"))
            assert len(records) == 1, records
            folder = os.path.dirname(records[0])
            now_ms = int(time.time() * 1000)
            old = ["%d-00000000-0000-4000-8000-%012d.json" % (now_ms - 31 * 86400 * 1000 - i, i)
                   for i in range(20)]
            recent = ["%d-00000000-0000-4000-8000-%012d.json" % (now_ms - 60000 - i * 1000, 100 + i)
                      for i in range(300)]
            for name in old + recent:
                with open(os.path.join(folder, name), "w") as f:
                    f.write("{}")
            assert r.call_tool("relay_search", {"name": "chromium"})["isError"] is False
            left = sorted(os.listdir(folder))
            assert len(left) == 256, len(left)
            assert not set(old) & set(left), "a record older than 30 days was kept"
            # The newest stay: both real searches, and the most recent of the planted ones.
            assert os.path.basename(records[0]) in left
            assert sorted(recent)[-254:] == [n for n in left if n in set(recent)]
    finally:
        svc.cleanup()


def test_search_failures(binary):
    svc = Standin(binary)
    try:
        bad = os.path.join(svc.root, "bad-catalog.json")
        with svc.relay(binary) as r:
            r.initialize()
            svc.fault({"route": "applications", "status": 503, "error": "catalog unavailable: test"})
            res = r.call_tool("relay_search", {"name": "chromium"})
            assert res["isError"] is True
            assert error_code(res) == "backend-unavailable", text(res)
            assert "catalog unavailable" in text(res)
            records = glob.glob(os.path.join(r.state_dir, "*", "search-diagnostics", "*.json"))
            with open(records[0]) as f:
                rec = json.load(f)
            assert rec["outcome"] == "failed" and rec["failure"] == "application discovery failed"
    finally:
        svc.cleanup()
    # A catalog that contradicts itself is refused as a whole.
    catalog = {"schemaVersion": 1, "images": [
        {"image": "ubuntu2404", "os": "linux", "architecture": "arm64", "applications": [
            {"id": "chromium", "name": "Chromium", "aliases": [], "version": "1"}]},
        {"image": "macos26", "os": "macos", "architecture": "arm64", "applications": [
            {"id": "chromium", "name": "Chrome", "aliases": [], "version": "2"}]}]}
    root = None
    svc = None
    try:
        import tempfile
        root = tempfile.mkdtemp(prefix="standin-cat-")
        path = os.path.join(root, "catalog.json")
        with open(path, "w") as f:
            json.dump(catalog, f)
        svc = Standin(binary, ["--catalog", path])
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_search", {"name": "chrom"})
            assert res["isError"] is True
            assert error_code(res) == "catalog-invalid", text(res)
            assert "chromium" in text(res)
    finally:
        if svc:
            svc.cleanup()
        if root:
            import shutil
            shutil.rmtree(root, ignore_errors=True)


def with_catalog(binary, catalog, fn):
    import shutil
    import tempfile
    root = tempfile.mkdtemp(prefix="standin-cat-")
    svc = None
    try:
        path = os.path.join(root, "catalog.json")
        with open(path, "w") as f:
            json.dump(catalog, f)
        svc = Standin(binary, ["--catalog", path])
        with svc.relay(binary) as r:
            r.initialize()
            fn(r)
    finally:
        if svc:
            svc.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def app(id_, name, aliases=(), version="1.0"):
    return {"id": id_, "name": name, "aliases": sorted(aliases), "version": version}


def test_search_ranking_and_case(binary):
    catalog = {"schemaVersion": 1, "images": [
        {"image": "ubuntu2404", "os": "linux", "architecture": "arm64", "applications": sorted([
            app("dpkg:chrome", "Chrome"), app("dpkg:chrome-beta", "Chrome Beta"),
            app("dpkg:google-chrome", "Google Chrome", version=None), app("dpkg:ecran", "\u00c9CRAN")],
            key=lambda a: a["id"])},
        {"image": "macos26", "os": "macos", "architecture": "arm64", "applications": sorted([
            app("bundle:x.browser", "Browser X", aliases=["chrome"]), app("dpkg:chrome", "Chrome", version="2.0")],
            key=lambda a: a["id"])}]}

    def check(r):
        s = structured(r.call_tool("relay_search", {"name": "CHROME"}))
        assert [a["name"] for a in s["applications"]] == ["Browser X", "Chrome", "Chrome Beta", "Google Chrome"], s
        chrome = s["applications"][1]["installations"]
        assert [(i["image"], i["version"]) for i in chrome] == [("macos26", "2.0"), ("ubuntu2404", "1.0")]
        assert s["applications"][3]["installations"][0]["version"] is None
        # On linux the macOS alias no longer counts.
        s = structured(r.call_tool("relay_search", {"name": "chrome", "os": "linux"}))
        assert [a["name"] for a in s["applications"]] == ["Chrome", "Chrome Beta", "Google Chrome"], s
        assert [i["image"] for i in s["applications"][0]["installations"]] == ["ubuntu2404"]
        # Unicode simple case mapping.
        s = structured(r.call_tool("relay_search", {"name": "\u00e9cran"}))
        assert [a["name"] for a in s["applications"]] == ["\u00c9CRAN"], s

    with_catalog(binary, catalog, check)


def test_search_bounds(binary):
    many = [app("app-%03d" % i, "app-%03d" % i) for i in range(150)]
    catalog = {"schemaVersion": 1, "images": [
        {"image": "ubuntu2404", "os": "linux", "architecture": "x86_64", "applications": many}]}

    def count_bound(r):
        res = r.call_tool("relay_search", {"name": "app"})
        s = structured(res)
        assert s["truncated"] is True
        assert sum(len(a["installations"]) for a in s["applications"]) == 100
        assert s["applications"][-1]["name"] == "app-099"
        assert text(res).splitlines()[0] == ('Found 100 application(s) with 100 installation(s) matching "app"; '
                                             "more were left out")

    with_catalog(binary, catalog, count_bound)
    long = [app("app-%03d" % i, "app-%03d-" % i + "x" * 240, version="v" * 256) for i in range(90)]
    catalog = {"schemaVersion": 1, "images": [
        {"image": "ubuntu2404", "os": "linux", "architecture": "x86_64", "applications": long}]}

    def byte_bound(r):
        s = structured(r.call_tool("relay_search", {"name": "app"}))
        assert s["truncated"] is True
        n = sum(len(a["installations"]) for a in s["applications"])
        assert 0 < n < 90, n
        assert len(json.dumps(s, indent=2, ensure_ascii=False).encode()) <= 50000

    with_catalog(binary, catalog, byte_bound)
    # Limits of the catalog itself: more than 16 aliases is catalog-invalid.
    bad = {"schemaVersion": 1, "images": [
        {"image": "ubuntu2404", "os": "linux", "architecture": "x86_64",
         "applications": [app("a", "A", aliases=["x%d" % i for i in range(17)])]}]}

    def invalid(r):
        res = r.call_tool("relay_search", {"name": "a"})
        assert error_code(res) == "catalog-invalid", text(res)

    with_catalog(binary, bad, invalid)


def test_probe_host_reports_the_service(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_probe", {})
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert list(s) == ["scope", "observedAt", "local", "backend", "environment", "guests",
                               "maxGuests", "capabilities"], list(s)
            b = s["backend"]
            assert b["machine"] == "machine-service" and b["service"] == svc.url
            assert b["reachable"] is True
            assert b["images"]["ubuntu2404"]["base_available"] is True
            assert b["images"]["macos26"]["kind"] == "macos"
            assert "macos_running" in b["capacity"]
            assert s["environment"] is None and s["guests"] == [] and s["maxGuests"] == 4
            for fact in ("userSessionActive", "idleSeconds"):
                f = s["local"][fact]
                assert "source" in f and "value" in f
                if f["value"] is None:
                    assert f["diagnostic"], f
            assert text(res).splitlines()[0] == "Host probe: backend reachable; 0 guest(s) held"
            probes = glob.glob(os.path.join(r.state_dir, "*", "probes", "*.json"))
            assert len(probes) == 1
            # A guest held shows up with its state.
            acq = r.call_tool("relay_acquire", ACQUIRE)
            assert acq["isError"] is False, text(acq)
            s = structured(r.call_tool("relay_probe", {"scope": "host"}))
            assert [g["guest"] for g in s["guests"]] == ["svc-1"]
            assert s["guests"][0]["guestState"] == "running"
    finally:
        svc.cleanup()
    # An unreachable service: the probe still answers.
    svc = Standin(binary)
    url = svc.url
    svc.cleanup()
    with Relay(binary, env={"MCP_RELAY_BACKEND": "machine-service", "MCP_RELAY_URL": url,
                            "MCP_RELAY_PLUGIN_PATH": plugin_dir(binary)}) as r:
        r.initialize()
        res = r.call_tool("relay_probe", {})
        assert res["isError"] is False, text(res)
        b = structured(res)["backend"]
        assert b["reachable"] is False and "cannot be reached" in b["diagnostic"], b
        assert "images" not in b
        assert text(res).startswith("Host probe: backend unreachable")


def test_acquisition_capabilities(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_acquisition_capabilities", {})
            if error_code(res) is None and "unconfigured" in json.dumps(structured(res)):
                # No console plugin is built: the relay says so honestly.
                s = structured(res)
                assert s["options"]["vnc"]["backends"]["linux"]["status"] == "unconfigured"
                return
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["schemaVersion"] == 1 and s["options"]["vnc"]["default"] is False
            assert s["options"]["vnc"]["backends"]["linux"]["available"] is False
            assert text(res).splitlines()[0] == "VNC console sharing: linux unavailable, macos unavailable"
            assert len(svc.requests("GET", "/acquisition-capabilities")) == 1
            assert svc.requests("POST", "/acquire") == []
    finally:
        svc.cleanup()


def test_acquire_and_release_through_the_service(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary, MCP_RELAY_GUEST_NETWORK="nat") as r:
            r.initialize()
            res = r.call_tool("relay_acquire", ACQUIRE)
            assert res["isError"] is False, text(res)
            s = structured(res)
            assert s["guest"] == "svc-1" and s["image"] == "ubuntu2404"
            assert s["purpose"].startswith("relay-svc-") and len(s["purpose"]) == len("relay-svc-") + 8
            assert s["vm"] in svc.machines()
            assert len(s["lease_id"]) == 32 and s["network"] == "nat" and s["console"] is None
            acq = svc.requests("POST", "/acquire")
            assert len(acq) == 1
            body = json.loads(acq[0]["body"])
            assert body == {"purpose": s["purpose"], "image": "ubuntu2404", "env": "none",
                            "ttl_hours": 0.25, "wait": True, "network": "nat"}, body
            # The identity check came first.
            seq_health = [e["seq"] for e in svc.requests("GET", "/health")]
            assert seq_health and min(seq_health) < acq[0]["seq"]
            # The ownership record is bound to this service.
            records = glob.glob(os.path.join(r.state_dir, "*", "guests", "svc-1", "lease.json"))
            with open(records[0]) as f:
                record = json.load(f)
            assert record["binding"]["machine"] == "machine-service"
            assert record["binding"]["endpoint"] == svc.url
            assert record["lease"]["vm"] == s["vm"]

            rel = r.call_tool("relay_release", {"guest": "svc-1"})
            assert rel["isError"] is False, text(rel)
            assert structured(rel)["destructionVerified"] is True
            assert s["vm"] not in svc.machines()
            released = svc.requests("POST", "/machines/%s/release" % s["vm"])
            assert len(released) == 1
            # The destruction check: GET /machines/<vm> answered 404.
            assert svc.requests("GET", "/machines/%s" % s["vm"])
    finally:
        svc.cleanup()


def test_acquire_refusals_pass_through(binary):
    svc = Standin(binary)
    try:
        with svc.relay(binary, MCP_RELAY_GUEST_NETWORK="internet") as r:
            r.initialize()
            # internet needs the relay's egress proxy (docs/egress.md), which machine-service
            # cannot serve: refused by the relay with the reason, before any request; never a
            # nat lease.
            res = r.call_tool("relay_acquire", ACQUIRE)
            assert error_code(res) == "backend-refused", text(res)
            assert "cannot give a guest network internet (it has no egress_listeners" in text(res)
            assert svc.requests("POST", "/acquire") == []
            assert svc.machines() == {}
        with svc.relay(binary) as r:
            r.initialize()
            # An image the service does not offer never reaches POST /acquire.
            res = r.call_tool("relay_acquire", dict(ACQUIRE, image="nope"))
            assert error_code(res) == "image-unavailable", text(res)
            assert len(svc.requests("POST", "/acquire")) == 0
    finally:
        svc.cleanup()


def test_long_refusal_reasons_pass_through_cut_to_4096_bytes(binary):
    """spec/tools.md §2.4: backend reasons reach the agent cut to 4,096 bytes, at a character boundary."""
    svc = Standin(binary)
    try:
        with svc.relay(binary) as r:
            r.initialize()
            # 3,000 bytes: arrives whole, its last words included.
            reason = "policy " + "x" * 2980 + " LAST-WORDS"
            svc.fault({"route": "acquire", "status": 403, "error": reason})
            res = r.call_tool("relay_acquire", ACQUIRE)
            assert error_code(res) == "backend-refused", text(res)
            message = structured(res)["error"]["message"]
            assert reason in message, message[-200:]
            # 6,000 bytes of two-byte characters: cut to at most 4,096 bytes, never mid-character.
            reason = "\u00e9" * 3000
            svc.fault({"route": "acquire", "status": 403, "error": reason})
            res = r.call_tool("relay_acquire", ACQUIRE)
            assert error_code(res) == "backend-refused", text(res)
            message = structured(res)["error"]["message"]
            assert "\u00e9" * 1500 in message, message[:300]
            assert len(message.encode("utf-8")) <= 4096, len(message.encode("utf-8"))
            assert "\ufffd" not in message
            assert svc.machines() == {}
    finally:
        svc.cleanup()


def test_wrong_service_is_refused_with_the_fix(binary):
    svc = Standin(binary, ["--service-name", "vm-service"])
    try:
        with svc.relay(binary) as r:
            r.initialize()
            res = r.call_tool("relay_acquire", ACQUIRE)
            assert error_code(res) == "backend-unavailable", text(res)
            assert ('answers "vm-service", not machine-service. This relay needs machine-service; '
                    "release every lease, then upgrade the service.") in text(res)
            assert svc.requests("POST", "/acquire") == []
    finally:
        svc.cleanup()


if __name__ == "__main__":
    run_tests(globals())
