#!/usr/bin/env python3
"""Lease renewal against the fault shim over reference-machine (spec/lifecycle.md §6).

Relay time is a frozen test clock that the test moves, so renewal is checked at exact
instants without waiting real minutes: every renewal the backend sees asks for at most the
15-minute window and never past the deadline, renewal stops at the deadline, a failed beat
is recorded and looked up without destroying anything, and a lease the backend lost is
closed as absent only once its destruction is verified.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from lifecycle_support import (BACKEND_MIN_MS, WINDOW_MS, Shim, acquire, guest_entry,  # noqa: E402
                               registry_rows, status, wait_status)


def test_renewal_never_passes_the_deadline_and_stops_at_it(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, ttlHours=0.5, image=fake.image)
            pid = r.proc.pid
            first = fake.wait_ops("acquire", 1)[0]
            deadline = fake.spec(first)["deadlineMs"]
            assert deadline == first["timeMs"] + 30 * 60 * 1000, first
            assert fake.spec(first)["ttlMs"] == WINDOW_MS, first  # min(15 min, ttlHours)
            # Move relay time in 3-minute steps; each step is due for one beat.
            renewals = 0
            for step in range(1, 13):
                fake.advance(3 * 60 * 1000)
                remaining = deadline - fake.now_ms
                if remaining >= BACKEND_MIN_MS:
                    renewals += 1
                    renew = fake.wait_ops("renew", renewals, pid=pid)[-1]
                    assert renew["timeMs"] == fake.now_ms, renew
                    assert renew["ttlMs"] == min(WINDOW_MS, remaining), (renew, remaining)
                else:
                    wait_status(r, lambda s: s["guests"][0]["renewal"]["state"] == "stopped",
                                what="renewal stopped")
            for renew in fake.ops("renew"):
                assert renew["ttlMs"] <= WINDOW_MS, renew
                assert renew["timeMs"] + renew["ttlMs"] <= deadline, renew
            with open(fake.lease_file(got["vm"])) as f:
                assert json.load(f)["expiresAtMs"] <= deadline  # what the backend holds
            assert renewals == 8, renewals  # at 3, 6, ..., 21 and 24 minutes
            g = guest_entry(r, "demo-1")
            assert g["renewal"]["state"] == "stopped" and g["active"] is False, g
            assert status(r)["active"] is False
            stopped = fake.events(got["evidencePath"], "renewal-stopped")
            assert len(stopped) == 1, stopped
            assert fake.ops("release") == []  # nothing is destroyed by the relay
            r.close_stdin()
            assert r.wait(timeout=30) == 0
        # Stopped renewal is not paused at the end: no renewal after the stop.
        assert len(fake.ops("renew")) == renewals
    finally:
        fake.cleanup()


def test_failed_beat_is_recorded_looked_up_and_retried(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            fake.script([{"op": "renew", "fault": "fail", "code": "unavailable", "reason": "service restarting",
                          "times": 1}])
            fake.advance(61_000)
            fake.wait_ops("renew", 1)
            g = wait_status(r, lambda s: s["guests"][0]["renewal"]["state"] == "failing",
                            what="renewal failing")["guests"][0]
            assert g["lastError"] == "Heartbeat lost: service restarting", g
            assert g["guestState"] in ("unknown", "running"), g  # the lookup may already have refreshed it
            assert g["active"] is True, g
            fake.wait_ops("inspect", 1)  # one lease lookup, queued in the guest's queue
            assert fake.events(got["evidencePath"], "heartbeat-uncertain")
            fake.advance(61_000)
            fake.wait_ops("renew", 2)
            wait_status(r, lambda s: s["guests"][0]["renewal"]["state"] == "renewing", what="renewing again")
            assert fake.ops("release") == []
    finally:
        fake.cleanup()


def test_lease_lost_at_the_backend_is_closed_as_absent(binary):
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, image=fake.image)
            assert len(registry_rows(fake.registry_text())) == 1
            # The backend forgets the machine (its reaper took it).
            shutil.rmtree(os.path.dirname(fake.lease_file(got["vm"])))
            fake.advance(61_000)
            s = wait_status(r, lambda s: s["closedGuests"], what="the guest closed")
            assert s["closedGuests"][0]["guest"] == "demo-1"
            assert s["closedGuests"][0]["reason"] == "absent", s
            assert s["guests"] == []
            assert registry_rows(fake.registry_text()) == []
            with open(got["evidencePath"] + ".lifecycle.json") as f:
                record = f.read()
            assert "backend lease absent and destruction verified" in record, record
            assert fake.ops("verify_destroyed"), fake.ops()
    finally:
        fake.cleanup()


def test_a_crashed_client_leaves_at_most_one_window(binary):
    # The backend's expiry is never more than the window ahead of the last renewal, so a
    # relay that dies without ending its session holds the machine for at most the window
    # plus the backend's grace.
    fake = Shim(binary)
    try:
        with fake.relay() as r:
            r.initialize()
            got = acquire(r, ttlHours=8, image=fake.image)
            for n in range(1, 4):
                fake.advance(5 * 60 * 1000)
                fake.wait_ops("renew", n)
            r.proc.kill()
            r.proc.wait(timeout=10)
        with open(fake.lease_file(got["vm"])) as f:
            lease = json.load(f)
        assert lease["expiresAtMs"] - fake.now_ms <= WINDOW_MS, lease
        # After the window, a backend that reclaims expired leases (reference-machine has no
        # reaper, so the test is that backend here) finds exactly this one expired, and another
        # session leases beside it.
        fake.advance(WINDOW_MS + 1000)
        expired = []
        for vm in fake.leased_vms():
            with open(fake.lease_file(vm)) as f:
                if json.load(f)["expiresAtMs"] < fake.now_ms:
                    expired.append(vm)
                    shutil.rmtree(os.path.dirname(fake.lease_file(vm)))
        assert expired == [got["vm"]], expired
        fake.session = "other-session"
        with fake.relay() as r2:
            r2.initialize()
            acquire(r2, task="other", image=fake.image)
    finally:
        fake.cleanup()


if __name__ == "__main__":
    run_tests(globals())
