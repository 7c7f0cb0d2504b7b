#!/usr/bin/env python3
"""The default session identity (spec/lifecycle.md §2, changed 2026-12-01): without
MCP_RELAY_SESSION it belongs to the project folder, so a restarted server and a client that
starts one server per call take back the project's guests; two projects never share one; a
second live process on the same project takes a fresh identity and says so (stderr and
relay_status); a fixed MCP_RELAY_SESSION keeps working. Claude Code's CLAUDE_PROJECT_DIR is
the project folder when MCP_RELAY_PROJECT is unset."""
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lifecycle_support import Shim, acquire, status, wait_status  # noqa: E402
from relay_client import Relay, run_tests  # noqa: E402
from support_common import structured, text_of  # noqa: E402


def project_identity(project):
    return "project-" + hashlib.sha256(os.path.realpath(project).encode()).hexdigest()[:32]


def one_shot(fake, calls, **env):
    """Starts a server, answers initialize, makes `calls` [(tool, args)], closes it; returns the
    results and the server's stderr."""
    r = fake.relay(**dict({"MCP_RELAY_SESSION": None}, **env))
    try:
        r.initialize()
        results = [r.call_tool(name, args) for name, args in calls]
        r.close_stdin()
        assert r.wait(timeout=60) == 0
        with open(r.stderr_path, errors="replace") as f:
            err = f.read()
        return results, err
    finally:
        r.close()


@contextlib.contextmanager
def live_relays(binary):
    """(the Shim, a function starting a relay on the project's own identity); every relay
    started is closed, and the Shim cleaned up, at the end."""
    fake = Shim(binary)
    started = []

    def start():
        r = fake.relay(MCP_RELAY_SESSION=None)
        started.append(r)
        return r
    try:
        yield fake, start
    finally:
        for r in reversed(started):
            r.close()
        fake.cleanup()


def settled(name):
    """relay_status shows `name` taken back (no longer reconciling)."""
    def check(s):
        return any(g["guest"] == name and g["phase"] not in ("reconciling",) for g in s["guests"])
    return check


def test_one_shot_servers_in_a_row_share_the_project_guests(binary):
    fake = Shim(binary)
    try:
        (acquired, st), _ = one_shot(fake, [("relay_acquire", {"task": "hello", "image": fake.image,
                                                               "extractions": []}),
                                            ("relay_status", {})])
        assert acquired["isError"] is False, text_of(acquired)
        assert structured(acquired)["guest"] == "hello-1"
        s = structured(st)
        assert s["sessionId"] == project_identity(fake.project), s
        assert s["sessionIdentity"] == {"source": "project", "note": None}, s
        # The next one-shot server (nothing set) sees the guest and can release it.
        r = fake.relay(MCP_RELAY_SESSION=None)
        try:
            r.initialize()
            s = wait_status(r, settled("hello-1"), what="hello-1 taken back")
            assert s["sessionId"] == project_identity(fake.project), s
            res = r.call_tool("relay_release", {"guest": "hello-1"})
            assert res["isError"] is False, text_of(res)
            assert structured(res)["released"] is True, structured(res)
        finally:
            r.close()
        # A third one sees it closed, and acquiring continues the names.
        (st, again), _ = one_shot(fake, [("relay_status", {}),
                                         ("relay_acquire", {"task": "hello", "image": fake.image,
                                                            "extractions": []})])
        s = structured(st)
        assert [c["guest"] for c in s["closedGuests"]] == ["hello-1"], s
        assert structured(again)["guest"] == "hello-2", text_of(again)
    finally:
        fake.cleanup()


def test_two_projects_never_share_an_identity(binary):
    fake = Shim(binary)
    other = tempfile.mkdtemp(prefix="relay-other-project-")
    try:
        (a,), _ = one_shot(fake, [("relay_acquire", {"task": "one", "image": fake.image, "extractions": []})])
        assert a["isError"] is False, text_of(a)
        (st,), _ = one_shot(fake, [("relay_status", {})], MCP_RELAY_PROJECT=other)
        s = structured(st)
        assert s["sessionId"] == project_identity(other) != project_identity(fake.project), s
        assert s["guests"] == [] and s["closedGuests"] == [], s
    finally:
        shutil.rmtree(other, ignore_errors=True)
        fake.cleanup()


def test_a_second_live_process_takes_a_fresh_identity(binary):
    with live_relays(binary) as (fake, start):
        first = start()
        first.initialize()
        acquire(first, task="live", image=fake.image)
        s1 = status(first)
        assert s1["sessionId"] == project_identity(fake.project), s1
        second = start()
        second.initialize()
        s2 = status(second)
        assert s2["sessionId"] != s1["sessionId"], (s1, s2)
        assert s2["sessionIdentity"]["source"] == "fresh", s2
        note = s2["sessionIdentity"]["note"]
        assert "pid %d" % first.proc.pid in note and s1["sessionId"] in note, note
        assert "MCP_RELAY_SESSION" in note, note
        # It does not see the first one's guest, and it can acquire its own.
        assert s2["guests"] == [], s2
        own = acquire(second, task="live", image=fake.image)
        assert own["guest"] == "live-1", own
        with open(second.stderr_path, errors="replace") as f:
            err = f.read()
        assert "holds this project's session %s" % s1["sessionId"] in err, err
        # The first is untouched.
        assert [g["guest"] for g in status(first)["guests"]] == ["live-1"]


def test_a_restart_waits_for_the_ending_process_instead_of_a_fresh_identity(binary):
    # A host restarting its server closes the old one and starts the new one at once: the old
    # is still ending (its session.lock says so) when the new one starts.
    with live_relays(binary) as (fake, start):
        first = start()
        first.initialize()
        acquire(first, task="restart", image=fake.image)
        first.close_stdin()
        second = start()
        second.initialize()
        s = wait_status(second, settled("restart-1"), timeout=40, what="restart-1 taken back")
        assert s["sessionId"] == project_identity(fake.project), s
        assert s["sessionIdentity"]["source"] == "project", s
        assert first.wait(timeout=30) == 0


def test_a_fixed_session_keeps_working(binary):
    fake = Shim(binary)
    try:
        (a, st), _ = one_shot(fake, [("relay_acquire", {"task": "fixed", "image": fake.image,
                                                        "extractions": []}),
                                     ("relay_status", {})], MCP_RELAY_SESSION="my-fixed-session")
        assert a["isError"] is False, text_of(a)
        assert structured(st)["sessionId"] == "my-fixed-session"
        assert structured(st)["sessionIdentity"] == {"source": "setting", "note": None}
        r = fake.relay(MCP_RELAY_SESSION="my-fixed-session")
        try:
            r.initialize()
            wait_status(r, settled("fixed-1"), what="fixed-1 taken back")
            res = r.call_tool("relay_release", {"guest": "fixed-1"})
            assert res["isError"] is False, text_of(res)
        finally:
            r.close()
        # The project's own identity is another session: it holds nothing.
        (st,), _ = one_shot(fake, [("relay_status", {})])
        assert structured(st)["guests"] == [] and structured(st)["closedGuests"] == []
    finally:
        fake.cleanup()


def test_claude_project_dir_is_the_project_when_mcp_relay_project_is_unset(binary):
    fake = Shim(binary)
    elsewhere = tempfile.mkdtemp(prefix="relay-cwd-")
    try:
        # Claude Code sets CLAUDE_PROJECT_DIR in the server's environment; the working folder
        # is elsewhere, and MCP_RELAY_PROJECT is not set.
        r = Relay(binary, env=dict(fake.env(MCP_RELAY_SESSION=None), MCP_RELAY_PROJECT=None,
                                   CLAUDE_PROJECT_DIR=fake.project),
                  state_dir=fake.state_dir, project=fake.project, cwd=elsewhere)
        try:
            r.initialize()
            s = status(r)
            assert s["project"] == os.path.realpath(fake.project), s
            assert s["sessionId"] == project_identity(fake.project), s
        finally:
            r.close()
        # An unexpanded placeholder counts as unset, as for MCP_RELAY_PROJECT.
        r = Relay(binary, env=dict(fake.env(MCP_RELAY_SESSION=None), MCP_RELAY_PROJECT="${CLAUDE_PROJECT_DIR}",
                                   CLAUDE_PROJECT_DIR=fake.project),
                  state_dir=fake.state_dir, project=fake.project, cwd=elsewhere)
        try:
            r.initialize()
            assert status(r)["project"] == os.path.realpath(fake.project)
        finally:
            r.close()
        # MCP_RELAY_PROJECT wins when set.
        r = Relay(binary, env=dict(fake.env(MCP_RELAY_SESSION=None), MCP_RELAY_PROJECT=elsewhere,
                                   CLAUDE_PROJECT_DIR=fake.project),
                  state_dir=fake.state_dir, project=fake.project, cwd=fake.project)
        try:
            r.initialize()
            assert status(r)["project"] == os.path.realpath(elsewhere)
        finally:
            r.close()
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
