#!/usr/bin/env python3
"""Protocol eras and the handshake (spec/mcp.md §3, §4; conformance checklist items 8-15)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import (LEGACY_VERSIONS, MODERN, NEWEST_LEGACY, SUPPORTED_VERSIONS, Relay,  # noqa: E402
                          run_tests)

SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


def test_initialize_echoes_legacy_versions(binary):
    # Item 8.
    with Relay(binary) as r:
        for v in LEGACY_VERSIONS:
            assert r.initialize(v)["protocolVersion"] == v


def test_initialize_answers_newest_legacy(binary):
    # Item 9.
    with Relay(binary) as r:
        for v in ["2099-01-01", MODERN, "", "garbage"]:
            assert r.initialize(v)["protocolVersion"] == NEWEST_LEGACY, v


def test_initialize_result(binary):
    # Item 10, and the exact shape of spec/mcp.md §3.2.
    with Relay(binary) as r:
        res = r.initialize()
        assert list(res) == ["protocolVersion", "capabilities", "serverInfo", "instructions"], res.keys()
        assert res["serverInfo"]["name"] == "relay"
        assert isinstance(res["serverInfo"]["version"], str) and res["serverInfo"]["version"]
        assert res["instructions"].startswith("mcp-relay gives you fresh, dedicated machines")
        assert res["capabilities"] == {"tools": {}}
        assert "resultType" not in res and "_meta" not in res


def test_initialize_needs_protocol_version(binary):
    with Relay(binary) as r:
        for params in [{}, {"protocolVersion": 2025}, {"protocolVersion": None}]:
            resp = r.request("initialize", params)
            assert resp["error"]["code"] == -32602, resp
        resp = r.request("initialize")
        assert resp["error"]["code"] == -32602, resp
        # initialize ignores _meta, whatever it carries.
        resp = r.request("initialize", {"protocolVersion": "2025-06-18",
                                        "_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01"}})
        assert resp["result"]["protocolVersion"] == "2025-06-18", resp


def test_second_initialize_replaces(binary):
    with Relay(binary) as r:
        assert r.initialize("2024-11-05")["protocolVersion"] == "2024-11-05"
        assert r.initialize("2025-06-18")["protocolVersion"] == "2025-06-18"
        assert r.list_tools()["tools"]


def test_discover(binary):
    # Items 11 and 12: server/discover without a prior initialize.
    with Relay(binary) as r:
        res = r.request("server/discover", {"_meta": Relay.modern_meta()})["result"]
        assert res["supportedVersions"] == SUPPORTED_VERSIONS
        assert res["capabilities"] == {"tools": {}}
        assert res["ttlMs"] == 3600000 and res["cacheScope"] == "public"
        assert res["resultType"] == "complete"
        assert res["_meta"][SERVER_INFO_KEY]["name"] == "relay"
        init = r.initialize()
        assert res["instructions"] == init["instructions"]
        # Also without _meta, and after initialize.
        res2 = r.request("server/discover")["result"]
        assert res2 == res


def test_discover_unsupported_version(binary):
    with Relay(binary) as r:
        resp = r.request("server/discover", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}})
        assert resp["error"]["code"] == -32022
        assert resp["error"]["data"] == {"supported": SUPPORTED_VERSIONS, "requested": "2030-01-01"}


def test_unsupported_version_error(binary):
    # Item 13, and a non-string version is written as its JSON text.
    with Relay(binary) as r:
        resp = r.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01"}},
                         id=7)
        assert resp == {"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32022, "message": "Unsupported protocol version",
            "data": {"supported": SUPPORTED_VERSIONS, "requested": "1900-01-01"}}}, resp
        resp = r.request("ping", {"_meta": {"io.modelcontextprotocol/protocolVersion": 20260728}})
        assert resp["error"]["code"] == -32022 and resp["error"]["data"]["requested"] == 20260728
        resp = r.request("ping", {"_meta": {"io.modelcontextprotocol/protocolVersion": None}})
        assert resp["error"]["code"] == -32022 and resp["error"]["data"]["requested"] is None
        resp = r.request("tools/call", {"name": "relay_status",
                                        "_meta": {"io.modelcontextprotocol/protocolVersion": "x"}})
        assert resp["error"]["code"] == -32022


def test_meta_not_an_object(binary):
    with Relay(binary) as r:
        for bad in [[], "x", 1, None]:
            resp = r.request("tools/list", {"_meta": bad})
            assert resp["error"]["code"] == -32602, (bad, resp)


def test_modern_and_legacy_tools_list(binary):
    # Item 14.
    with Relay(binary) as r:
        modern = r.list_tools(meta=Relay.modern_meta())
        assert modern["ttlMs"] == 3600000 and modern["cacheScope"] == "public"
        assert modern["resultType"] == "complete"
        assert modern["_meta"][SERVER_INFO_KEY]["name"] == "relay"
        r.initialize()
        legacy = r.list_tools()
        for key in ["ttlMs", "cacheScope", "resultType", "_meta"]:
            assert key not in legacy, key
        assert list(legacy) == ["tools"]
        assert legacy["tools"] == modern["tools"]


def test_legacy_version_in_meta_gets_legacy_shapes(binary):
    # A request whose _meta names a legacy version is served under that version's rules.
    with Relay(binary) as r:
        res = r.list_tools(meta={"io.modelcontextprotocol/protocolVersion": "2025-06-18"})
        assert list(res) == ["tools"]
        res = r.call_tool("relay_status", {}, meta={"io.modelcontextprotocol/protocolVersion": "2024-11-05"})
        assert "resultType" not in res and "_meta" not in res


def test_modern_missing_capabilities_is_fine(binary):
    with Relay(binary) as r:
        res = r.request("ping", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})["result"]
        assert res == {"resultType": "complete", "_meta": {SERVER_INFO_KEY: res["_meta"][SERVER_INFO_KEY]}}


def test_ping(binary):
    # Item 15.
    with Relay(binary) as r:
        assert r.request("ping")["result"] == {}
        r.initialize()
        assert r.request("ping")["result"] == {}
        assert r.request("ping", {})["result"] == {}
        modern = r.request("ping", {"_meta": Relay.modern_meta()})["result"]
        assert modern["resultType"] == "complete" and modern["_meta"][SERVER_INFO_KEY]["name"] == "relay"


def test_modern_tool_result(binary):
    # Results carry resultType and serverInfo under modern rules only (spec/mcp.md §3.6).
    with Relay(binary) as r:
        modern = r.call_tool("relay_status", {}, meta=Relay.modern_meta())
        assert modern["resultType"] == "complete"
        assert modern["_meta"][SERVER_INFO_KEY]["name"] == "relay"
        legacy = r.call_tool("relay_status", {})
        assert "resultType" not in legacy and "_meta" not in legacy
        assert legacy["structuredContent"]["maxGuests"] == modern["structuredContent"]["maxGuests"]
        # Errors carry no modern fields in either era.
        resp = r.request("nope", {"_meta": Relay.modern_meta()})
        assert set(resp) == {"jsonrpc", "id", "error"} and set(resp["error"]) <= {"code", "message", "data"}


if __name__ == "__main__":
    run_tests(globals())
