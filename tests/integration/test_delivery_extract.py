"""relay_extract's refusals (spec/tools.md §3.8, spec/evidence.md §8.2): not staged, undeclared names, a
symbolic link in the output, a guest file name that could never verify in a package, a source
that changes while it is pulled, nothing at the path, and a sealed package. Each keeps the
guest and leaves no half-made destination folder; outputs pulled before a failure stay and are
listed in the error result.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import DeliveryEnv, replace_receiver, structured, text_of, variants  # noqa: E402

# A receiver that changes the extracted folder right after archiving it (a racing guest).
RACING = '''#!/bin/sh
R=$(dirname "$0")
"$R/receiver.real" "$@"
rc=$?
if [ "$1" = archive ] && [ -f "$R/.race" ]; then
  echo changed >> "$R/workspace/moving/a.txt"
fi
exit $rc
'''

DECLARED = [{"name": "first", "path": "first.txt"}, {"name": "linked", "path": "linked"},
            {"name": "badname", "path": "badname"}, {"name": "moving", "path": "moving"},
            {"name": "absent", "path": "absent/file.txt"}]


def code_of(res):
    return structured(res)["error"]["code"]


def extract_refusals(env):
    with env.relay() as r:
        r.initialize()
        acq = env.acquire(r, extractions=DECLARED)
        g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
        res = r.call_tool("relay_extract", {"guest": g, "names": ["first"]})
        assert code_of(res) == "not-staged", text_of(res)
        env.stage(r, g)
        env.run(r, g, "echo one > first.txt; mkdir -p linked badname moving; echo x > linked/real.txt; "
                      "ln -s /etc/hostname linked/link; echo y > 'badname/a:b.txt'; echo a > moving/a.txt; "
                      "echo b > moving/b.txt")

        res = r.call_tool("relay_extract", {"guest": g, "names": ["first", "undeclared"]})
        assert code_of(res) == "undeclared-output", text_of(res)
        assert not os.path.exists(os.path.join(evidence, "extractions", "first")), "nothing may be pulled"

        res = r.call_tool("relay_extract", {"guest": g, "names": ["first", "linked"]})
        assert code_of(res) == "integrity-failed", text_of(res)
        assert "link" in structured(res)["error"]["message"], text_of(res)
        pulled = structured(res)["extractions"]
        assert [e["name"] for e in pulled] == ["first"], pulled
        assert os.path.exists(os.path.join(pulled[0]["destination"], "first.txt"))
        assert not os.path.exists(os.path.join(evidence, "extractions", "linked"))

        res = r.call_tool("relay_extract", {"guest": g, "names": ["badname"]})
        assert code_of(res) == "integrity-failed", text_of(res)
        assert "file name not allowed in an evidence package" in structured(res)["error"]["message"]
        assert not os.path.exists(os.path.join(evidence, "extractions", "badname"))

        res = r.call_tool("relay_extract", {"guest": g, "names": ["absent"]})
        assert code_of(res) == "output-missing", text_of(res)

        replace_receiver(env, r, g, root, RACING, then="touch %s/.race" % root)
        res = r.call_tool("relay_extract", {"guest": g, "names": ["moving"]})
        assert code_of(res) == "integrity-failed", text_of(res)
        assert "source changed during extraction" in structured(res)["error"]["message"], text_of(res)
        assert not os.path.exists(os.path.join(evidence, "extractions", "moving"))
        env.diag(r, g, "rm %s/.race" % root)
        res = r.call_tool("relay_extract", {"guest": g, "names": ["moving"]})
        assert res["isError"] is False, text_of(res)
        assert structured(res)["extractions"][0]["files"] == 2

        state = env.status_guest(r, g)
        assert state["phase"] == "staged" and state["active"] is True, state
        env.diag(r, g, "rm -r linked badname")
        fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
        assert fin["isError"] is False, text_of(fin)
        incomplete = sorted(e["name"] for e in structured(fin)["incompleteExtractions"])
        assert incomplete == ["absent", "badname", "linked"], structured(fin)["incompleteExtractions"]


def test_extract_refusals(binary):
    for env in variants(binary):
        extract_refusals(env)


def test_extract_from_a_sealed_package(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay() as r:
            r.initialize()
            g = env.acquire(r, extractions=[{"name": "out", "path": "out.txt"}])["guest"]
            env.stage(r, g)
            env.run(r, g, "echo out > out.txt")
            env.write_control({"faults": [{"op": "verify_destroyed", "fault": "fail", "code": "unverified", "times": 1}]})
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert code_of(fin) == "destruction-unverified", text_of(fin)
            res = r.call_tool("relay_extract", {"guest": g, "names": ["out"]})
            assert code_of(res) == "sealed", text_of(res)
            assert "sealed" in structured(res)["error"]["message"]
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
