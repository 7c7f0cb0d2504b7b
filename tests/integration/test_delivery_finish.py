"""relay_finish end to end (spec/tools.md §3.8-§3.9, spec/evidence.md §5, §8, §9.1, §10-§12): acquire,
stage with a workspace, recorded runs with real snapshots (capture-x11 on an Xvfb display),
background step downloads publishing display originals, relay_extract of a file and of a
directory, relay_finish with a never-produced output in incompleteExtractions, the delivered
package (no step staging left, manifest, OPENING.txt, review), index.html in headless Chromium
with every step and its images, and `mcp-relay review` of the package before and after it is
edited.

Backends: the fault shim over reference-machine with capture-x11 (always, once built);
machine-local when it can run
here (root, namespaces, overlayfs).
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import (DeliveryEnv, chromium_run, download_records, events, files_under,  # noqa: E402
                              review, sha256_file, structured, text_of)

EXTRACTIONS = [{"name": "report", "path": "out/report.txt"},
               {"name": "tree", "path": "out/tree"},
               {"name": "never", "path": "missing/never.txt"}]


def xsetroot(display, colour):
    subprocess.run(["xsetroot", "-display", display, "-solid", colour], check=True, timeout=30)


def colour_pixels(png):
    """Counts of pure red and pure green pixels in a PNG (ImageMagick's histogram)."""
    p = subprocess.run(["convert", png, "-format", "%c", "histogram:info:-"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    counts = {"red": 0, "green": 0}
    for line in p.stdout.decode().splitlines():
        parts = line.split(":", 1)
        if len(parts) != 2:
            continue
        n = int(parts[0].strip())
        if "#FF0000" in parts[1].upper():
            counts["red"] += n
        if "#00FF00" in parts[1].upper():
            counts["green"] += n
    return counts


def full_flow(binary, env, colours):
    display = env.xvfb.display if env.xvfb else None
    if colours:
        xsetroot(display, "red")
    ws = os.path.join(env.project, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "input.txt"), "w") as f:
        f.write("from the host workspace\n")
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r, extractions=EXTRACTIONS)
        g, evidence = acq["guest"], acq["evidencePath"]
        st = env.stage(r, g, workspace="ws")
        assert st["capabilities"]["snapshots"]["enabled"] is True, st["capabilities"]
        paint = ("xsetroot -display %s -solid green; " % display) if colours else ""
        first = env.run(r, g, paint + "mkdir -p out/tree/sub && cp input.txt out/report.txt && "
                        "echo one > out/tree/one.txt", reason="write the report and the first tree file")
        paint = ("xsetroot -display %s -solid red; " % display) if colours else ""
        second = env.run(r, g, paint + "echo two > out/tree/sub/two.txt", reason="add a nested file",
                         step={"id": "nested", "expected": "two.txt exists"})
        ids = [structured(first)["executionId"], structured(second)["executionId"]]
        assert structured(first)["imageDelivery"]["status"] in ("pending", "attached"), text_of(first)

        # Background downloads bring both steps home and publish their display originals.
        env.wait_downloads(r, g, lambda d: d["downloaded"] == 2 and d["queued"] == 0 and d["inFlight"] == 0,
                           what="two downloaded steps")
        records = download_records(evidence)
        assert sorted(records) == sorted(ids), records.keys()
        for eid in ids:
            rec = records[eid]
            assert rec["status"] == "downloaded" and rec["coalescedBy"] is None, rec
            assert rec["attempts"] and rec["attempts"][-1]["error"] is None, rec
            paths = [f["path"] for f in rec["files"]]
            assert "state/receiver/receipts/%s.json" % eid in paths, paths
            shots = [p for p in paths if p.startswith("state/snapshots/")]
            assert len(shots) == 2, paths
            for f in rec["files"]:
                placed = os.path.join(evidence, "host", "steps", eid, f["path"])
                assert sha256_file(placed) == f["sha256"], placed
            assert rec["image"]["phase"] == "after", rec
            image_dir = os.path.join(evidence, "host", "images", rec["image"]["imageId"])
            original = os.path.join(image_dir, "original.png")
            after = [f for f in rec["files"] if f["path"].endswith("-after.png")][0]
            assert sha256_file(original) == after["sha256"] and os.stat(original).st_nlink == 1
            receipts = [n for n in os.listdir(image_dir) if n.startswith("delivery-")]
            assert receipts, os.listdir(image_dir)
            with open(os.path.join(image_dir, receipts[0])) as f:
                receipt = json.load(f)
            assert receipt["status"] == "downloaded" and receipt["image"]["imageId"] == rec["image"]["imageId"]

        # relay_extract: a file and a directory, hashed on both sides.
        x = r.call_tool("relay_extract", {"guest": g, "names": ["report", "tree"]})
        assert x["isError"] is False, text_of(x)
        got = {e["name"]: e for e in structured(x)["extractions"]}
        assert got["report"]["kind"] == "file" and got["report"]["files"] == 1
        dest = got["report"]["destination"]
        assert dest.startswith(os.path.join(evidence, "extractions", "report") + "/")
        with open(os.path.join(dest, "report.txt")) as f:
            assert f.read() == "from the host workspace\n"
        assert got["tree"]["kind"] == "directory"
        assert [f["path"] for f in got["tree"]["facts"]] == ["one.txt", "sub/two.txt"], got["tree"]
        for fact in got["tree"]["facts"]:
            assert sha256_file(os.path.join(got["tree"]["destination"], fact["path"])) == fact["sha256"]
        uuid = os.path.basename(dest)
        assert os.path.exists(os.path.join(evidence, "host", "extractions", uuid + ".json"))
        assert events(evidence, "extract"), "no extract event"

        # Refusals keep the guest.
        bad = r.call_tool("relay_extract", {"guest": g, "names": ["nope"]})
        assert bad["isError"] and structured(bad)["error"]["code"] == "undeclared-output", text_of(bad)
        assert "report" in structured(bad)["error"]["message"]
        missing = r.call_tool("relay_extract", {"guest": g, "names": ["never"]})
        assert structured(missing)["error"]["code"] == "output-missing", text_of(missing)
        assert not os.path.exists(os.path.join(evidence, "extractions", "never"))

        # relay_finish.
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300, progress_token="finish-progress")
        assert fin["isError"] is False, text_of(fin)
        s = structured(fin)
        assert s["delivered"] is True and s["deliveryVerified"] is True, s
        progress = [n["params"] for n in r.notifications if n.get("method") == "notifications/progress"
                    and n["params"].get("progressToken") == "finish-progress"]
        assert [p["progress"] for p in progress] == [1, 2, 3, 4, 5, 6], progress
        assert all(p.get("total") == 6 for p in progress), progress
        assert [p.get("message") for p in progress] == ["downloads", "outputs", "recording", "package",
                                                        "verification", "destruction"], progress
        assert s["snapshots"] == "complete" and s["execution"] == "passed", s
        assert s["humanReview"] == "not-performed" and s["findings"] == [], s
        assert s["incompleteExtractions"] == [{"name": "never", "path": "missing/never.txt",
                                               "error": s["incompleteExtractions"][0]["error"]}], s
        assert "not produced" in s["incompleteExtractions"][0]["error"]
        assert sorted(e["name"] for e in s["extractions"]) == ["report", "tree"], s
        assert s["released"] is True and s["destructionVerified"] is True and s["guestsHeld"] == []
        assert s["manifestPath"] == os.path.join(evidence, "manifest.json")
        assert text_of(fin).startswith("Finished guest %s: evidence delivered and verified at %s; snapshots "
                                       "complete; execution passed; not reviewed by a person; machine "
                                       "destroyed" % (g, evidence)), text_of(fin)
        assert events(evidence, "extraction-incomplete"), "no extraction-incomplete event"

        status = structured(r.call_tool("relay_status"))
        assert status["guests"] == [], status["guests"]
        closed = [c for c in status["closedGuests"] if c["guest"] == g]
        assert closed and closed[0]["reason"] == "finished", status["closedGuests"]
        again = r.call_tool("relay_finish", {"guest": g})
        assert structured(again)["error"]["code"] == "guest-closed", text_of(again)
        nothing = r.call_tool("relay_release", {"guest": g})
        assert nothing["isError"] and structured(nothing)["error"]["code"] == "nothing-held", text_of(nothing)
        assert structured(nothing)["released"] is False

    # The package on disk.
    files = files_under(evidence)
    assert not any(p.startswith("host/steps/") for p in files), files
    for name in ("OPENING.txt", "index.html", "manifest.json"):
        assert name in files, files
    with open(os.path.join(evidence, "manifest.json")) as f:
        manifest = json.load(f)
    listed = sorted(e["path"] for k in ("records", "snapshots", "attachments") for e in manifest[k])
    assert listed == sorted(p for p in files if p != "manifest.json"), set(listed) ^ set(files)
    assert len(manifest["snapshots"]) == 4, manifest["snapshots"]
    with open(evidence + ".lifecycle.json") as f:
        life = json.load(f)
    assert life["reason"] == "finished" and life["delivered"] is True, life
    assert not os.path.exists(evidence + ".delivery-error.json")
    leftovers = [n for n in os.listdir(os.path.dirname(evidence)) if n.startswith(os.path.basename(evidence))]
    assert all(not n.endswith(".finalization-attempts") or not files_under(os.path.join(
        os.path.dirname(evidence), n)) for n in leftovers), leftovers

    rc, data, err = review(binary, evidence)
    assert rc == 0, (rc, err)
    assert data["verification"]["ok"] is True and data["execution"] == "passed", data["verification"]
    step_ids = [st["id"] for st in data["steps"]]
    assert len(step_ids) == 2 and "nested" in step_ids, step_ids
    return evidence, data


def check_viewer(binary, env, evidence, data, colours):
    page = os.path.join(evidence, "index.html")
    dom = chromium_run(page, "dump-dom", env.root)
    for st in data["steps"]:
        assert st["id"] in dom, "step %s is not in the rendered viewer" % st["id"]
        for phase in ("before", "after"):
            src = st["snapshots"][phase]
            assert src and src in dom, "the %s image of %s is not in the page" % (phase, st["id"])
    if colours:
        shot = chromium_run(page, "screenshot", env.root)
        counts = colour_pixels(shot)
        # Every step's before is red and its after green (or the other way round for the
        # second step): both colours must be painted by the loaded images.
        assert counts["red"] > 2000 and counts["green"] > 2000, counts


def check_edited(binary, evidence):
    report = [p for p in files_under(evidence) if p.startswith("extractions/report/")][0]
    with open(os.path.join(evidence, report), "a") as f:
        f.write("edited afterwards\n")
    rc, data, err = review(binary, evidence)
    assert rc == 1, (rc, err)
    assert data["verification"]["ok"] is False
    assert any(report in e for e in data["verification"]["errors"]), data["verification"]
    assert report in err, err


def test_finish_fake_with_snapshots(binary):
    env = DeliveryEnv(binary, capture=True)
    try:
        evidence, data = full_flow(binary, env, colours=True)
        check_viewer(binary, env, evidence, data, colours=True)
        check_edited(binary, evidence)
    finally:
        env.cleanup()


def test_finish_machine_local(binary):
    env = DeliveryEnv(binary, local=True)
    try:
        with env.relay() as r:
            r.initialize()
            acq = env.acquire(r, extractions=EXTRACTIONS)
            g, evidence = acq["guest"], acq["evidencePath"]
            st = r.call_tool("relay_stage", {"guest": g}, timeout=300)
            assert st["isError"] is False, text_of(st)
            snapshots = structured(st)["capabilities"]["snapshots"]["enabled"]
            print("    machine-local snapshots: %s" % structured(st)["capabilities"]["snapshots"], flush=True)
            env.run(r, g, "mkdir -p out/tree/sub && echo r > out/report.txt && echo one > out/tree/one.txt")
            env.wait_downloads(r, g, lambda d: d["downloaded"] == 1 and d["inFlight"] == 0)
            x = r.call_tool("relay_extract", {"guest": g, "names": ["report", "tree"]})
            assert x["isError"] is False, text_of(x)
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
            s = structured(fin)
            assert s["delivered"] and s["released"] and s["destructionVerified"], s
            assert [e["name"] for e in s["incompleteExtractions"]] == ["never"], s
        rc, data, err = review(binary, evidence)
        assert rc == 0, err
        if snapshots:
            assert all(st["snapshots"] for st in data["steps"]), data["steps"]
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
