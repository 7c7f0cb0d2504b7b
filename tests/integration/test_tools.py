#!/usr/bin/env python3
"""The fourteen tool definitions on the wire (spec/tools.md §1; spec/mcp.md §6, §14;
conformance checklist items 18-23)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402

# spec/tools.md §1: name, title, readOnly, destructive, idempotent, openWorld, guest
# ("required", "none" or "optional").
TABLE = [
    ("relay_search", "Search installed applications", True, False, True, False, "none"),
    ("relay_probe", "Probe host and guest readiness", True, False, True, False, "optional"),
    ("relay_acquisition_capabilities", "Read acquisition capabilities", True, False, True, False, "none"),
    ("relay_acquire", "Acquire a VM", False, False, False, False, "none"),
    ("relay_stage", "Stage the guest runtime", False, False, False, False, "required"),
    ("relay_script", "Run a guest script", False, False, False, True, "required"),
    ("relay_image", "Retrieve a saved image", True, False, True, False, "required"),
    ("relay_extract", "Extract declared outputs", False, False, False, False, "required"),
    ("relay_finish", "Finish and deliver evidence", False, True, False, False, "required"),
    ("relay_release", "Release the VM", False, True, False, False, "required"),
    ("relay_console_resolve", "Resolve console status", True, False, True, False, "required"),
    ("relay_console_open", "Open console viewing", False, False, False, False, "required"),
    ("relay_console_cancel", "Cancel console viewing", False, False, False, False, "required"),
    ("relay_status", "Show relay status", True, False, True, False, "none"),
]
GUEST_SCHEMA = {
    "type": "string",
    "pattern": "^[a-z0-9][a-z0-9-]{0,47}$",
    "description": "Which guest to act on: the name relay_acquire gave it, such as login-test-1.",
}
ROOT_FORBIDDEN = ["anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$schema", "$ref", "$defs"]


def raw_tools_list(r):
    r.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    return r.recv_raw()


def test_names_order_and_bytes(binary):
    # Item 18.
    with Relay(binary) as r:
        r.initialize()
        first = raw_tools_list(r)
        second = raw_tools_list(r)
        assert first == second, "two tools/list answers differ"
        tools = json.loads(first)["result"]["tools"]
        assert [t["name"] for t in tools] == [row[0] for row in TABLE]
        assert "nextCursor" not in json.loads(first)["result"]


def test_titles_and_annotations(binary):
    # Item 19.
    with Relay(binary) as r:
        tools = r.list_tools()["tools"]
        for tool, row in zip(tools, TABLE):
            name, title, ro, destructive, idempotent, open_world, _ = row
            assert list(tool) == ["name", "title", "description", "inputSchema", "annotations"], tool.keys()
            assert tool["title"] == title, name
            assert isinstance(tool["description"], str) and len(tool["description"]) > 50, name
            ann = tool["annotations"]
            assert ann == {"title": title, "readOnlyHint": ro, "destructiveHint": destructive,
                           "idempotentHint": idempotent, "openWorldHint": open_world}, (name, ann)
            for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]:
                assert isinstance(ann[hint], bool)


def walk_schema(schema, where, problems):
    """spec/tools.md §1 schema rule 3 below the root: descriptions, types, closed objects."""
    if (schema.get("type") == "object" and "anyOf" not in schema) or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            problems.append("%s: nested object not closed" % where)
        for key, prop in (schema.get("properties") or {}).items():
            p = "%s/%s" % (where, key)
            if "description" not in prop:
                problems.append("%s: no description" % p)
            if "type" not in prop:
                problems.append("%s: no type" % p)
            walk_schema(prop, p, problems)
    if schema.get("type") == "array":
        if "maxItems" not in schema:
            problems.append("%s: array without maxItems" % where)
        if "items" in schema:
            walk_schema(schema["items"], where + "/items", problems)
    if schema.get("type") == "string" and not any(k in schema for k in ("enum", "pattern", "maxLength", "const")):
        problems.append("%s: string without enum, pattern or length bound" % where)
    if schema.get("type") in ("number", "integer") and not ("minimum" in schema and "maximum" in schema):
        problems.append("%s: number without minimum/maximum" % where)
    for branch in schema.get("anyOf", []):
        walk_schema(branch, where + "/anyOf", problems)


def test_input_schemas(binary):
    # Item 20 and the schema rules of spec/tools.md §1.
    with Relay(binary) as r:
        tools = r.list_tools()["tools"]
        problems = []
        for tool in tools:
            s = tool["inputSchema"]
            name = tool["name"]
            if s.get("type") != "object" or s.get("additionalProperties") is not False:
                problems.append("%s: root is not a closed object" % name)
            for key in ROOT_FORBIDDEN:
                if key in s:
                    problems.append("%s: root has %s" % (name, key))
            for key in ("action", "kind"):
                if key in s.get("properties", {}):
                    problems.append("%s: root property %s" % (name, key))
            for key in ("outputSchema", "_meta", "icons", "execution"):
                if key in tool:
                    problems.append("%s: has %s" % (name, key))
            walk_schema(s, name, problems)
        assert not problems, "\n".join(problems)


def test_guest_property(binary):
    # Item 21.
    with Relay(binary) as r:
        tools = r.list_tools()["tools"]
        for tool, row in zip(tools, TABLE):
            props = tool["inputSchema"].get("properties", {})
            required = tool["inputSchema"].get("required", [])
            kind = row[6]
            if kind == "required":
                assert props.get("guest") == GUEST_SCHEMA, tool["name"]
                assert "guest" in required, tool["name"]
            elif kind == "none":
                assert "guest" not in props, tool["name"]
            else:
                assert props.get("guest", {}).get("pattern") == GUEST_SCHEMA["pattern"], tool["name"]
                assert "guest" not in required, tool["name"]


def test_cursor_is_invalid(binary):
    # Item 22.
    with Relay(binary) as r:
        for cursor in ["abc", "", None, 0]:
            resp = r.request("tools/list", {"cursor": cursor})
            assert resp["error"]["code"] == -32602 and resp["error"]["message"] == "Invalid cursor", resp


def test_schema_flag_matches_tools_list(binary):
    # Item 23: --schema prints the same fourteen definitions, byte for byte.
    out = subprocess.run([binary, "--schema"], capture_output=True, timeout=30)
    assert out.returncode == 0, out
    with Relay(binary) as r:
        line = raw_tools_list(r)
    prefix = b'{"jsonrpc":"2.0","id":"list","result":{"tools":'
    assert line.startswith(prefix) and line.endswith(b"}}"), line[:100]
    assert out.stdout == line[len(prefix):-2] + b"\n"


if __name__ == "__main__":
    run_tests(globals())
