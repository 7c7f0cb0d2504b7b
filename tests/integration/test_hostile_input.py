#!/usr/bin/env python3
"""Hostile input at the MCP stream, through the real binary (issue 17, defects 4 and 5).

A lone surrogate id is echoed exactly (spec/mcp.md §2.1); a NUL in any text field is
invalid-input naming the field, script code with a NUL is refused whole, and a tool
name with a NUL names no tool (spec/lifecycle.md §12 rule 1). The fuzz harnesses
(tests/fuzz/) cover the same layers at random; these are the cases that were seen.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402
from runs_support import stage, variants  # noqa: E402


def call_raw(r, rid, name, arguments_json):
    r.send_raw(('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}\n'
                % (rid, name, arguments_json)).encode())
    msg = json.loads(r.recv_raw(timeout=60))
    assert msg["id"] == rid, msg
    return msg["result"]


def error_of(result):
    assert result.get("isError") is True, result
    return result["structuredContent"]["error"]


def test_lone_surrogate_id_is_echoed_exactly(binary):
    with Relay(binary) as r:
        r.send_raw(b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n')
        line = r.recv_raw()
        assert b'"id":"\\ud800"' in line, line
        # U+FFFD itself is another id, echoed as itself.
        r.send_raw('{"jsonrpc":"2.0","id":"\ufffd","method":"ping"}\n'.encode())
        assert json.loads(r.recv_raw())["id"] == "\ufffd"


def test_nul_in_text_fields_is_refused_naming_the_field(binary):
    cases = [
        ("relay_stage", '{"guest":"g-1","workspace":"ws\\u0000/../../outside"}', "/workspace"),
        ("relay_stage", '{"guest":"g-1","files":[{"local":"a\\u0000b","path":"x"}]}', "/files/0/local"),
        ("relay_script", '{"guest":"g-1","language":"shell","inline":false,"localPath":"a.sh\\u0000"}',
         "/localPath"),
        ("relay_image", '{"guest":"g-1","target":{"source":"application","name":"out\\u0000junk"}}',
         "/target/name"),
        ("relay_search", '{"name":"\\u0000"}', "/name"),
    ]
    with Relay(binary) as r:
        r.initialize()
        for i, (tool, args, pointer) in enumerate(cases):
            err = error_of(call_raw(r, 100 + i, tool, args))
            assert err["code"] == "invalid-input", err
            assert err["message"].startswith("Invalid %s input: %s contains U+0000" % (tool, pointer)), err
        err = error_of(call_raw(r, 200, "relay_script",
                                '{"guest":"g-1","language":"shell","inline":true,"diagnostic":true,'
                                '"code":"printf A\\u0000; printf B"}'))
        assert err["code"] == "invalid-input", err
        assert "/code contains U+0000" in err["message"] and "refused whole" in err["message"], err
        err = error_of(call_raw(r, 201, "relay_status\\u0000x", "{}"))
        assert err["code"] == "unknown-tool", err


def test_file_names_not_utf8_leave_as_utf8(binary):
    # Defect 1: a workspace file named by bytes that are not UTF-8 reached stdout raw, and
    # every later relay_status repeated it. Every line must be UTF-8 (relay_client's recv
    # fails on one that is not), whatever the stage answers.
    for v in variants(binary, kinds=("shim", "local")):
        ws = os.path.join(v.project, "ws").encode()
        os.makedirs(ws, exist_ok=True)
        with open(os.path.join(ws, b"not-utf8-\xff\xfe"), "wb") as f:
            f.write(b"x")
        with v.relay() as r:
            r.initialize()
            g = v.acquire(r)
            res = json.dumps(stage(r, g["guest"], workspace="ws"), ensure_ascii=False)
            # The name is refused by the receiver's scan; the message names it with U+FFFD.
            assert "not-utf8-\ufffd\ufffd" in res, res[:500]
            status = json.dumps(r.call_tool("relay_status", {}), ensure_ascii=False)
            assert "\udcff" not in status, status[:500]


if __name__ == "__main__":
    run_tests(globals())
