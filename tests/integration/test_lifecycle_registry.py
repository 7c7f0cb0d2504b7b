#!/usr/bin/env python3
"""The task registry through the real binary (spec/lifecycle.md §10, §14).

Which file is used (MCP_RELAY_REGISTRY, a valid ~/AGENTS.md VM table, else the managed
registry.md), MCP_RELAY_REGISTRY validated at startup, rows added at acquire and removed at
release without touching anyone else's rows or the file's line endings, the flock sidecar,
and two relay processes acquiring and releasing at once against one registry file without
losing a row.
"""
import fcntl
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import Relay, run_tests  # noqa: E402
from lifecycle_support import Shim, acquire, registry_rows, response_for, send_call  # noqa: E402

TABLE = ("# Notes\r\n\r\n## Using VMs\r\n\r\n"
         "| Machine | OS | Task Name | Agent | Project | Start Date |\r\n"
         "| --- | --- | --- | --- | --- | --- |\r\n"
         "| mac-mini-2 | macos26 | someone-elses-task | codex | /home/b/p | 2026-01-01 |\r\n"
         "\r\n## Other\r\n\r\ntext\r\n")


def read(path):
    with open(path, newline="") as f:
        return f.read()


def write(path, text):
    with open(path, "w", newline="") as f:
        f.write(text)


def test_invalid_registry_setting_stops_the_server(binary):
    fake = Shim(binary)
    try:
        bad = os.path.join(fake.root, "bad.md")
        write(bad, "# no table here\n")
        r = Relay(binary, env=fake.env(MCP_RELAY_REGISTRY=bad), state_dir=fake.state_dir,
                  project=fake.project)
        try:
            # An invalid setting is answered, not hidden (spec/lifecycle.md §14, changed 2026-12-01):
            # every call names it, and the server exits 2 when stdin closes.
            r.initialize()
            res = r.call_tool("relay_status")
            assert res["isError"] is True and "MCP_RELAY_REGISTRY is invalid" in res["content"][0]["text"], res
            r.close_stdin()
            assert r.wait(timeout=20) == 2
            err = r.stderr_text()
            assert "mcp-relay: MCP_RELAY_REGISTRY must hold a valid VM table" in err, err
            assert "Using VMs" in err
        finally:
            r.close()
        assert read(bad) == "# no table here\n"
    finally:
        fake.cleanup()


def test_configured_registry_keeps_other_rows_and_line_endings(binary):
    fake = Shim(binary)
    try:
        path = os.path.join(fake.root, "team-registry.md")
        write(path, TABLE)
        link = os.path.join(fake.root, "registry-link.md")
        os.symlink(path, link)  # updated at its target; the link stays a link
        with fake.relay(MCP_RELAY_REGISTRY=link) as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            text = read(path)
            rows = registry_rows(text)
            assert len(rows) == 1, text
            row = rows[0]
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert cells == ["localhost (machine-faultshim %s)" % got["purpose"], fake.image, got["purpose"],
                             "mcp-relay s1", os.path.realpath(fake.project), cells[5]], cells
            # Right after the last row, with the file's CRLF line ending.
            assert ("| mac-mini-2 | macos26 | someone-elses-task | codex | /home/b/p | 2026-01-01 |\r\n"
                    + row + "\r\n\r\n## Other") in text, text
            assert "\n" not in text.replace("\r\n", ""), "a bare LF was written"
            assert os.path.islink(link)
            assert os.path.exists(path + ".mcp-relay.lock")
            res = r.call_tool("relay_release", {"guest": "demo-1"})
            assert res["isError"] is False, res
        assert read(path) == TABLE
        assert os.path.exists(path + ".mcp-relay.lock")  # never removed
    finally:
        fake.cleanup()


def test_agents_md_is_used_only_when_it_holds_a_valid_table(binary):
    fake = Shim(binary)
    try:
        agents = os.path.join(fake.root, "AGENTS.md")  # HOME is fake.root
        write(agents, TABLE.replace("\r\n", "\n"))
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            assert len(registry_rows(read(agents))) == 1
            assert not os.path.exists(os.path.join(fake.state_dir, "registry.md"))
            r.call_tool("relay_release", {"guest": "demo-1"})
        assert read(agents) == TABLE.replace("\r\n", "\n")
        # An AGENTS.md without a valid table is left alone: the managed registry is used.
        invalid = "# Agents\n\n## Using VMs\n\nnothing tabular\n"
        write(agents, invalid)
        with fake.relay() as r:
            r.initialize()
            acquire(r, image=fake.image)
            managed = os.path.join(fake.state_dir, "registry.md")
            assert len(registry_rows(read(managed))) == 1
            assert read(managed).startswith("# mcp-relay task registry\n\n## Using VMs\n")
            assert oct(os.stat(managed).st_mode & 0o777) == oct(0o600)
        assert read(agents) == invalid
    finally:
        fake.cleanup()


def test_registry_lock_timeout_refuses_the_acquisition(binary):
    fake = Shim(binary)
    try:
        path = os.path.join(fake.root, "registry.md")
        write(path, TABLE)
        holder = os.open(path + ".mcp-relay.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process holds the registry
        try:
            with fake.relay(MCP_RELAY_REGISTRY=path) as r:
                r.initialize()
                res = r.call_tool("relay_acquire", {"task": "demo", "image": fake.image, "extractions": []},
                                  timeout=60)
                err = res["structuredContent"]["error"]
                assert err["code"] == "registry-conflict", err
                assert "registry lock timeout: " + path + ".mcp-relay.lock" in err["message"], err
                assert fake.ops("acquire") == []  # nothing was requested
                assert r.call_tool("relay_status")["structuredContent"]["closedGuests"][0]["reason"] == \
                    "not-acquired"
        finally:
            os.close(holder)
        assert read(path) == TABLE
    finally:
        fake.cleanup()


def test_two_processes_fighting_over_the_registry_lose_no_row(binary):
    fake = Shim(binary)
    try:
        path = os.path.join(fake.root, "shared-registry.md")
        write(path, TABLE)
        relays = []
        try:
            for session in ("left", "right"):
                fake.session = session
                r = fake.relay(MCP_RELAY_REGISTRY=path)
                r.initialize()
                relays.append(r)
            # Both send four acquisitions at once; eight rows must land.
            pending = []
            for r in relays:
                pending.append((r, [send_call(r, "relay_acquire",
                                              {"task": "fight", "image": fake.image, "extractions": []})
                                    for _ in range(4)]))
            names = []
            for r, ids in pending:
                for rid in ids:
                    res = response_for(r, rid, timeout=60)["result"]
                    assert res["isError"] is False, res
                    names.append((r, res["structuredContent"]["guest"]))
            rows = registry_rows(read(path))
            assert len(rows) == 8, read(path)
            assert "someone-elses-task" in read(path)
            # And they release at once, too.
            pending = [(r, send_call(r, "relay_release", {"guest": name})) for r, name in names]
            for r, rid in pending:
                assert response_for(r, rid, timeout=60)["result"]["isError"] is False
            assert read(path) == TABLE
        finally:
            for r in relays:
                r.close()
    finally:
        fake.cleanup()


def test_rows_of_other_agents_are_never_touched(binary):
    fake = Shim(binary)
    try:
        path = os.path.join(fake.root, "registry.md")
        write(path, TABLE)
        with fake.relay(MCP_RELAY_REGISTRY=path) as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            # Someone edits our row by hand: the row is no longer ours to remove.
            text = read(path)
            edited = text.replace("| mcp-relay s1 |", "| someone else |")
            write(path, edited)
            time.sleep(0.01)
            res = r.call_tool("relay_release", {"guest": "demo-1"})
            assert res["isError"] is False, res  # the machine is destroyed all the same
            assert read(path) == edited
            assert got["purpose"] in read(path)
            assert "cannot remove the registry row of demo-1" in r.stderr_text()
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
