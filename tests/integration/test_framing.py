#!/usr/bin/env python3
"""Framing and JSON-RPC classification (spec/mcp.md §1, §2; conformance checklist items 1-7)."""
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests, sanitized_build, skip  # noqa: E402

PING = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n'


def test_nothing_before_first_request(binary):
    # Item 1: no output before the first request, even while plugins load.
    with Relay(binary) as r:
        r.expect_silence(1.0)
        r.send_raw(PING % 1)
        assert r.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_every_line_is_jsonrpc(binary):
    # Item 2: every stdout line is one JSON object or array with "jsonrpc": "2.0", through
    # startup, errors, a batch and shutdown.
    with Relay(binary) as r:
        r.send_raw(b"not json\n" + PING % 1 + b'[{"jsonrpc":"2.0","id":2,"method":"ping"}]\n'
                   b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"relay_status"}}\n'
                   b'{"jsonrpc":"2.0","id":4,"method":"nope"}\n')
        r.close_stdin()
        lines = r.read_until_eof()
        assert r.wait() == 0
        assert len(lines) == 5, lines
        for line in lines:
            msg = json.loads(line)
            items = msg if isinstance(msg, list) else [msg]
            assert items and all(m.get("jsonrpc") == "2.0" for m in items), line


def test_not_json_then_valid(binary):
    # Item 3.
    with Relay(binary) as r:
        r.send_raw(b"{this is not json\n")
        err = r.recv()
        assert err["id"] is None and err["error"]["code"] == -32700, err
        assert err["error"]["message"] == "Parse error"
        r.send_raw(PING % 7)
        assert r.recv() == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_invalid_utf8_is_parse_error(binary):
    with Relay(binary) as r:
        r.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\xff\xfe"}}\n')
        err = r.recv()
        assert err["id"] is None and err["error"]["code"] == -32700, err
        # An overlong encoding and an encoded surrogate are not UTF-8 either.
        r.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":"\xc0\xaf"}}\n')
        assert r.recv()["error"]["code"] == -32700
        r.send_raw(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"\xed\xa0\x80"}}\n')
        assert r.recv()["error"]["code"] == -32700
        r.send_raw(PING % 4)
        assert r.recv()["id"] == 4


def test_sixteen_mib_line(binary):
    # Item 4: a 16 MiB relay_script request is read whole and refused as invalid-input.
    code = "x" * (16 * 1024 * 1024)
    with Relay(binary) as r:
        r.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "relay_script",
                           "arguments": {"guest": "g-1", "language": "shell", "inline": True,
                                         "code": code}}})
        resp = r.recv(timeout=120)
        assert resp["id"] == 1 and "result" in resp, str(resp)[:300]
        res = resp["result"]
        assert res["isError"] is True
        assert res["structuredContent"]["error"]["code"] == "invalid-input", res
        assert res["content"][0]["text"].startswith("Invalid relay_script input: /code"), res
        assert len(json.dumps(resp)) < 10000, "the refusal must not echo the script"
        r.send_raw(PING % 2)
        assert r.recv()["id"] == 2


def test_ids_echoed_exactly(binary):
    # Item 5, and numbers are not normalised (spec/mcp.md §2.1 decision).
    with Relay(binary) as r:
        for token in [b'"abc"', b"7", b"1.50", b"-0", b"1e3", b"2E-2", b"123456789012345678901234",
                      b'"a\\u00e9\\/\xf0\x9f\x98\x80"', b"-9223372036854775808", b"0.0"]:
            r.send_raw(b'{"jsonrpc":"2.0","id":' + token + b',"method":"ping"}\n')
            line = r.recv_raw()
            assert line.startswith(b'{"jsonrpc":"2.0","id":'), line
            echoed = line[len(b'{"jsonrpc":"2.0","id":'):-len(b',"result":{}}')]
            if token.startswith(b'"'):
                assert json.loads(echoed) == json.loads(token), (token, echoed)
            else:
                assert echoed == token, (token, echoed)


def test_crlf_line_ending(binary):
    # Item 6.
    with Relay(binary) as r:
        r.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n')
        assert r.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_blank_lines_ignored(binary):
    with Relay(binary) as r:
        r.send_raw(b"\n   \n\t\r\n" + PING % 1)
        assert r.recv()["id"] == 1
        r.expect_silence(0.3)


def test_line_split_across_writes(binary):
    with Relay(binary) as r:
        msg = PING % 12345
        for i in range(len(msg)):
            r.send_raw(msg[i:i + 1])
        assert r.recv()["id"] == 12345


def test_batch_of_two(binary):
    # Item 7: one array with two answers, on one line.
    with Relay(binary) as r:
        r.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "relay_status"}}])
        answer = r.recv()
        assert isinstance(answer, list) and len(answer) == 2, answer
        assert sorted(a["id"] for a in answer) == [1, 2]


def test_batch_rules(binary):
    with Relay(binary) as r:
        # A batch of notifications gets no answer.
        r.send([{"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "method": "notifications/whatever"}])
        r.expect_silence(0.3)
        # An empty array: one -32600 with id null.
        r.send([])
        err = r.recv()
        assert isinstance(err, dict) and err["id"] is None and err["error"]["code"] == -32600, err
        # Invalid elements are answered inside the array; notifications are not.
        r.send([1, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 9, "method": "ping"}, {"jsonrpc": "2.0", "id": 10, "result": {}}])
        answer = r.recv()
        assert isinstance(answer, list) and len(answer) == 2, answer
        assert answer[0] == {"jsonrpc": "2.0", "id": None,
                             "error": {"code": -32600, "message": "Invalid Request"}}, answer
        assert answer[1] == {"jsonrpc": "2.0", "id": 9, "result": {}}


def test_classification(binary):
    # spec/mcp.md §2.1, row by row.
    with Relay(binary) as r:
        def one(raw):
            r.send_raw(raw + b"\n")
            return r.recv()

        # JSON but not an object or array.
        for raw in [b"3", b'"x"', b"null", b"true"]:
            err = one(raw)
            assert err["id"] is None and err["error"]["code"] == -32600, (raw, err)
        # No "jsonrpc": "2.0": -32600 with its id when that id is a string or number.
        assert one(b'{"id":5,"method":"ping"}')["error"]["code"] == -32600
        assert one(b'{"id":5,"method":"ping"}')["id"] == 5
        assert one(b'{"jsonrpc":"1.0","id":"s","method":"ping"}')["id"] == "s"
        assert one(b'{"jsonrpc":"2.0"}')["error"]["code"] == -32600
        assert one(b'{"jsonrpc":2,"id":[1],"method":"ping"}')["id"] is None
        # A bad id: null, boolean, object, array.
        for bad in [b"null", b"true", b"{}", b"[]"]:
            err = one(b'{"jsonrpc":"2.0","id":' + bad + b',"method":"ping"}')
            assert err["id"] is None and err["error"]["code"] == -32600, (bad, err)
        # method not a string.
        err = one(b'{"jsonrpc":"2.0","id":3,"method":7}')
        assert err["id"] == 3 and err["error"]["code"] == -32600
        # params present but not an object.
        for bad in [b"[]", b"1", b'"x"', b"null"]:
            err = one(b'{"jsonrpc":"2.0","id":4,"method":"ping","params":' + bad + b"}")
            assert err["id"] == 4 and err["error"]["code"] == -32602, (bad, err)
        # A response from the client: ignored, with a note on stderr.
        r.send_raw(b'{"jsonrpc":"2.0","id":99,"result":{}}\n{"jsonrpc":"2.0","id":null,"error":'
                   b'{"code":-1,"message":"m"}}\n')
        r.expect_silence(0.3)
        assert "ignored a JSON-RPC response" in r.stderr_text()
        # Notifications are never answered, even malformed ones.
        r.send_raw(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":[]}\n')
        r.expect_silence(0.3)


def test_duplicate_member_names(binary):
    # A member name twice in one object makes the line invalid JSON for the relay (decision:
    # json-c would keep only one of the values silently).
    with Relay(binary) as r:
        r.send_raw(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}\n')
        err = r.recv()
        assert err["id"] is None and err["error"]["code"] == -32700, err
        r.send_raw(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"relay_status",'
                   b'"arguments":{"a":1,"a":1}}}\n')
        assert r.recv()["error"]["code"] == -32700


def test_output_is_raw_utf8_and_one_line(binary):
    # Non-ASCII text is written as raw UTF-8; no line breaks inside a message.
    with Relay(binary) as r:
        r.send_raw('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_nöpe"}}\n'
                   .encode())
        line = r.recv_raw()
        assert "relay_nöpe".encode() in line, line
        assert b"\\u00f6" not in line


def test_final_line_without_newline(binary):
    with Relay(binary) as r:
        r.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
        r.close_stdin()
        lines = r.read_until_eof()
        assert lines == [b'{"jsonrpc":"2.0","id":1,"result":{}}'], lines
        assert r.wait() == 0


def test_message_too_large(binary):
    # spec/mcp.md §1: when memory for a line cannot be obtained, the rest of the line is discarded,
    # the answer is -32700 "Message too large" with id null, and the stream stays usable.
    if sanitized_build(binary):
        skip("the address-space limit this test uses cannot be combined with AddressSanitizer")
    limit = 768 * 1024 * 1024

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = Relay(binary, preexec_fn=limit_memory)
    with r:
        chunk = b"a" * (1 << 20)
        r.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"')
        for _ in range(1024):  # 1 GiB: more than the address space allows
            r.send_raw(chunk)
        r.send_raw(b'"}}\n' + PING % 2)
        err = r.recv(timeout=120)
        assert err["id"] is None and err["error"]["code"] == -32700, err
        assert err["error"]["message"] == "Message too large", err
        assert r.recv(timeout=30) == {"jsonrpc": "2.0", "id": 2, "result": {}}


if __name__ == "__main__":
    run_tests(globals())
