"""Earlier recordings at finish (spec/evidence.md §9.1 step 6, spec/guest.md §4): after a recording reset
the guest records into <evidence folder>-recording-<id8>; relay_finish delivers the earlier
recording as its own verified package (without guest I/O) and the current one beside it. The
reset takes the download queue over (queued steps coalesced by "reset").
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import download_records, events, review, structured, text_of, variants  # noqa: E402
from test_delivery_hostile import guest_with_one_honest_step, set_mode  # noqa: E402


def test_finish_delivers_earlier_recordings(binary):
    for env in variants(binary):
        earlier_recordings(binary, env)


def earlier_recordings(binary, env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r)
        g, first = acq["guest"], acq["evidencePath"]
        env.stage(r, g)
        before = structured(env.run(r, g, "echo before the reset"))["executionId"]
        st = r.call_tool("relay_stage", {"guest": g, "resetRecording": True}, timeout=300)
        assert st["isError"] is False, text_of(st)
        entry = env.status_guest(r, g)
        second = entry["evidencePath"]
        assert second != first and second.startswith(first + "-recording-"), (first, second)
        assert [p["path"] for p in entry["previousEvidence"]] == [first], entry["previousEvidence"]
        after = structured(env.run(r, g, "echo after the reset"))["executionId"]
        env.wait_downloads(r, g, lambda d: d["queued"] == 0 and d["inFlight"] == 0)
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is False, text_of(fin)
        assert structured(fin)["evidencePath"] == second
    for folder, eid in ((first, before), (second, after)):
        assert os.path.exists(os.path.join(folder, "manifest.json")), folder
        rc, data, err = review(binary, folder)
        assert rc == 0, (folder, err)
        ids = [d["executionId"] for d in data["details"].values()]
        assert eid in ids, (folder, ids)
    rec = download_records(first).get(before)
    assert rec and rec["status"] in ("downloaded", "coalesced"), rec
    if rec["status"] == "coalesced":
        assert rec["coalescedBy"] == "reset", rec
    rc, data, _ = review(binary, first)
    assert data["packageId"] == "pkg-" + os.path.basename(first)
    rc, data, _ = review(binary, second)
    assert data["packageId"] == "pkg-" + os.path.basename(second)
    assert data["taskId"] == os.path.basename(first), data["taskId"]


def test_reset_pull_falls_back_file_by_file(binary):
    for env in variants(binary):
        reset_against_hostile_archives(binary, env)


def reset_against_hostile_archives(binary, env):
    canary = tempfile.mkdtemp(prefix="relay-reset-canary-")
    try:
        with env.relay() as r:
            r.initialize()
            # After one honest step, every `receiver archive` answers a tampered archive (one
            # byte flipped, its frame rewritten to match), so the next step's download is
            # refused and the reset must bring its evidence home some other way.
            acq, honest = guest_with_one_honest_step(env, r)
            g, first, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
            set_mode(env, r, g, root, "hash", canary)
            tampered = structured(env.run(r, g, "echo tampered"))["executionId"]
            env.wait_downloads(r, g, lambda d: d["failed"] == 1 and d["inFlight"] == 0)
            st = r.call_tool("relay_stage", {"guest": g, "resetRecording": True}, timeout=300)
            assert st["isError"] is False, text_of(st)
            fallbacks = [e for e in events(first, "archive-fallback")
                         if e["details"]["operation"] == "recording reset"]
            assert fallbacks and "archive refused" in fallbacks[0]["details"]["error"], events(first)
            assert os.listdir(canary) == []
            # The reset staged afresh (the real receiver is back): finish is honest again.
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
        rc, data, err = review(binary, first)
        assert rc == 0, err
        ids = [d["executionId"] for d in data["details"].values()]
        assert honest in ids and tampered in ids, ids
        assert not os.path.exists(first + ".reset-attempts") or os.listdir(first + ".reset-attempts") == []
    finally:
        shutil.rmtree(canary, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
