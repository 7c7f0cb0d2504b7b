"""relay_release packaging (spec/tools.md §3.10 step 3, spec/evidence.md §5.6, §9.2): a staged guest's
evidence is packaged before its machine is destroyed (queued step downloads coalesced into the
release's own pull, outputs pulled where they exist, the package verified); a packaging failure
is recorded and never stops the release; an unstaged guest's folder is left as it is; a failed
destruction keeps ownership and a second release completes; with no guest held, relay_release
is an error that says nothing was released.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import (DeliveryEnv, download_records, files_under, replace_receiver, review, structured,  # noqa: E402
                              text_of, variants)

# A receiver whose `archive` is slow, so that step downloads queue up behind it.
SLOW = '''#!/bin/sh
R=$(dirname "$0")
if [ "$1" = archive ] && [ -f "$R/.slow" ]; then
  sleep 2
fi
exec "$R/receiver.real" "$@"
'''


def slow_receiver(env, r, g, root):
    replace_receiver(env, r, g, root, SLOW, then="touch %s/.slow" % root)


def test_release_packages_and_coalesces(binary):
    for env in variants(binary):
        release_packages_and_coalesces(binary, env)


def release_packages_and_coalesces(binary, env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r, extractions=[{"name": "made", "path": "made.txt"},
                                          {"name": "never", "path": "never/made.txt"}])
        g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
        env.stage(r, g)
        slow_receiver(env, r, g, root)
        ids = []
        for i in range(4):
            res = env.run(r, g, "echo %d >> made.txt" % i)
            ids.append(structured(res)["executionId"])
        d = env.status_guest(r, g)["downloads"]
        assert d["queued"] + d["inFlight"] >= 2, d
        rel = r.call_tool("relay_release", {"guest": g}, timeout=300)
        assert rel["isError"] is False, text_of(rel)
        s = structured(rel)
        assert s["released"] is True and s["reason"] == "released" and s["destructionVerified"] is True, s
        assert s["delivered"] is True and s["deliveryVerified"] is True, s
        assert s["manifestPath"] == os.path.join(evidence, "manifest.json") and s["deliveryError"] is None, s
        assert [e["name"] for e in s["incompleteExtractions"]] == ["never"], s
        assert text_of(rel).startswith("Released guest %s: machine destroyed; evidence kept at %s"
                                       % (g, evidence)), text_of(rel)
        closed = structured(r.call_tool("relay_status"))["closedGuests"]
        assert closed[-1]["guest"] == g and closed[-1]["reason"] == "released", closed
        nothing = r.call_tool("relay_release", {"guest": g})
        assert nothing["isError"] and structured(nothing)["error"]["code"] == "nothing-held", text_of(nothing)
        assert "nothing was released" in structured(nothing)["error"]["message"]
    records = download_records(evidence)
    assert sorted(records) == sorted(ids), records.keys()
    coalesced = [rec for rec in records.values() if rec["status"] == "coalesced"]
    assert coalesced, [rec["status"] for rec in records.values()]
    assert all(rec["coalescedBy"] == "release" for rec in coalesced), coalesced
    assert all(rec["status"] in ("downloaded", "coalesced") for rec in records.values()), records
    with open(evidence + ".lifecycle.json") as f:
        life = json.load(f)
    assert life["reason"] == "released" and life["delivered"] is True and life["released"] is True, life
    rc, data, err = review(binary, evidence)
    assert rc == 0, err
    assert len([st for st in data["steps"] if st["inputMode"] != "diagnostic"]) == 4, data["steps"]
    assert any(p.startswith("extractions/made/") for p in files_under(evidence))


def test_release_packaging_failure_still_releases(binary):
    for env in variants(binary):
        release_packaging_failure_still_releases(binary, env)


def release_packaging_failure_still_releases(binary, env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r)
        g, evidence = acq["guest"], acq["evidencePath"]
        env.stage(r, g)
        env.run(r, g, "true")
        env.wait_downloads(r, g, lambda d: d["downloaded"] == 1 and d["inFlight"] == 0)
        os.symlink("/etc/hostname", os.path.join(evidence, "host", "planted"))
        rel = r.call_tool("relay_release", {"guest": g}, timeout=300)
        assert rel["isError"] is False, text_of(rel)
        s = structured(rel)
        assert s["released"] is True and s["destructionVerified"] is True, s
        assert s["delivered"] is False and s["deliveryVerified"] is False and s["manifestPath"] is None, s
        assert "host/planted" in s["deliveryError"]["error"], s["deliveryError"]
        assert not os.path.exists(os.path.join(evidence, "manifest.json"))
        with open(evidence + ".delivery-error.json") as f:
            assert "host/planted" in json.load(f)["error"]
        assert any(p.startswith("state/journal/") for p in files_under(evidence))


def test_release_unstaged_and_failed_destruction(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r)
            g, evidence = acq["guest"], acq["evidencePath"]
            before = files_under(evidence) if os.path.isdir(evidence) else []
            env.write_control({"faults": [{"op": "verify_destroyed", "fault": "fail", "code": "unverified", "times": 1}]})
            rel = r.call_tool("relay_release", {"guest": g}, timeout=300)
            assert rel["isError"] is True, text_of(rel)
            assert structured(rel)["error"]["code"] == "destruction-unverified", text_of(rel)
            held = [x for x in structured(r.call_tool("relay_status"))["guests"] if x["guest"] == g]
            assert held, "a failed release keeps ownership"
            rel = r.call_tool("relay_release", {"guest": g}, timeout=300)
            assert rel["isError"] is False, text_of(rel)
            s = structured(rel)
            assert s["delivered"] is False and s["manifestPath"] is None and s["deliveryError"] is None, s
            assert not os.path.exists(os.path.join(evidence, "manifest.json"))
            assert not os.path.exists(os.path.join(evidence, "OPENING.txt"))
            after = [p for p in files_under(evidence) if not p.startswith("host/events/")]
            assert after == [p for p in before if not p.startswith("host/events/")], (before, after)
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
