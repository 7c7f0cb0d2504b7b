"""Step downloads across a restart (spec/evidence.md §5.5, spec/lifecycle.md §8, §11): when the session
ends in pause mode the download in flight is aborted and writes nothing more, queued steps keep
their `queued` records, and the next process with the same MCP_RELAY_SESSION takes the guest
back and brings those steps home before relay_finish seals the package.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relay_client import run_tests  # noqa: E402
from delivery_support import DeliveryEnv, download_records, review, structured, text_of  # noqa: E402

SLOW = '''#!/bin/sh
R=$(dirname "$0")
if [ "$1" = archive ] && [ -f "$R/.slow" ]; then
  sleep 2
fi
exec "$R/receiver.real" "$@"
'''


def test_queued_steps_survive_a_restart(binary):
    env = DeliveryEnv(binary)
    try:
        with env.relay(MCP_RELAY_ON_EXIT="pause") as r:
            r.initialize()
            acq = env.acquire(r)
            g, evidence, root = acq["guest"], acq["evidencePath"], acq["guestRoot"]
            env.stage(r, g)
            env.diag(r, g, "set -e\ncp %(R)s/receiver %(R)s/receiver.real\n"
                     "cat > %(R)s/receiver.tmp <<'RELAY_EOF'\n%(sh)sRELAY_EOF\n"
                     "chmod 700 %(R)s/receiver.tmp\nmv %(R)s/receiver.tmp %(R)s/receiver\ntouch %(R)s/.slow\n"
                     % {"R": root, "sh": SLOW})
            ids = [structured(env.run(r, g, "echo %d" % i))["executionId"] for i in range(3)]
            d = env.status_guest(r, g)["downloads"]
            assert d["queued"] >= 1, d
            r.close_stdin()
            assert r.wait(timeout=60) == 0, r.stderr_text()[-2000:]
        records = download_records(evidence)
        waiting = [eid for eid in ids if records[eid]["status"] == "queued"]
        assert waiting, {eid: records[eid]["status"] for eid in ids}
        assert all(records[eid]["status"] in ("queued", "downloaded") for eid in ids), records
        for eid in waiting:
            assert not os.path.exists(os.path.join(evidence, "host", "steps", eid)), eid

        with env.relay(MCP_RELAY_ON_EXIT="pause") as r:
            r.initialize()
            deadline = time.monotonic() + 60
            while True:
                records = download_records(evidence)
                if all(records[eid]["status"] == "downloaded" for eid in ids):
                    break
                assert time.monotonic() < deadline, {eid: records[eid]["status"] for eid in ids}
                time.sleep(0.1)
            for eid in waiting:
                assert os.path.isdir(os.path.join(evidence, "host", "steps", eid)), eid
            fin = r.call_tool("relay_finish", {"guest": g}, timeout=300)
            assert fin["isError"] is False, text_of(fin)
        rc, _, err = review(binary, evidence)
        assert rc == 0, err
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
