#!/usr/bin/env python3
"""The resident capture program of `receiver serve` (spec/guest.md §17 item 5), driven directly against
the static receiver with a stand-in named relay-x11shot (a shell script: one-shot with --out, resident
with --serve, its answers chosen by the test) so that every way a resident program can go wrong is
met: serve starts one for the first run with a capture and keeps it for the next; each resident shot
is still checked as §11 says (a file that is no PNG fails the shot though the answer said success); a
failure answer or an answer for another path is taken again the one-shot way (and an out-of-step
program is replaced); one that does not answer within the capture's limit is killed and the shot
fails as a timed-out capture; RELAY_RECEIVER_CAPTURE_RESIDENT=off keeps every shot one-shot. The real
relay-x11shot against a real display: test_runs_resident_capture.py."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests  # noqa: E402
from test_receiver_serve import Serve, receipt_of  # noqa: E402
from test_receiver_stdin import Guest  # noqa: E402

STANDIN = r"""#!/bin/sh
log=%(log)s
png() { printf '\211PNG\r\n\032\nstand-in' > "$1"; }
case " $* " in
*" --serve "*)
  echo "start $$" >> "$log"
  while IFS= read -r out; do
    m=$(cat %(mode)s)
    echo "shot $m $out" >> "$log"
    case $m in
    good) png "$out"; printf '{"screenshot_file_path":"%%s","width":1,"height":1}\n' "$out" ;;
    bad-file) echo nope > "$out"; printf '{"screenshot_file_path":"%%s","width":1,"height":1}\n' "$out" ;;
    stale) printf '{"screenshot_file_path":"/var/tmp/elsewhere.png","width":1,"height":1}\n' ;;
    fail) printf '{"exit":3,"diagnostic":"display went away"}\n' ;;
    hang) sleep 30 ;;
    esac
  done
  exit 0 ;;
esac
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
echo "oneshot $out" >> "$log"
png "$out"
printf '{"screenshot_file_path":"%%s","width":1,"height":1}\n' "$out"
"""


class Bench:
    def __init__(self, binary):
        self.g = Guest(binary)
        d = self.g.path("standin")
        os.makedirs(d)
        self.log, self.mode = os.path.join(d, "log"), os.path.join(d, "mode")
        self.prog = os.path.join(d, "relay-x11shot")
        with open(self.prog, "w") as f:
            f.write(STANDIN % {"log": self.log, "mode": self.mode})
        os.chmod(self.prog, 0o755)
        self.set("good")
        self.n = 0

    def set(self, mode):
        with open(self.mode, "w") as f:
            f.write(mode)

    def capture(self, timeout_ms=10000):
        return {"plugin": "capture-x11", "argv": [self.prog, "--display", ":0", "--out", "@OUT@"],
                "check": "png-file", "timeoutMs": timeout_ms}

    def lines(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().split("\n")[:-1]

    def run(self, s, timeout_ms=10000):
        """One run with a before- and an after-snapshot; (receipt, the log lines it added)."""
        self.n += 1
        before = len(self.lines())
        frame, parts = s.ask(self.g.request("run-c%02d" % self.n, "true\n", capture=self.capture(timeout_ms)))
        return receipt_of(parts), self.lines()[before:]

    def journal(self):
        with open(self.g.path("state/journal/events.jsonl")) as f:
            return f.read()


def kinds(lines):
    return [x.split()[0] + (" " + x.split()[1] if x.startswith("shot") else "") for x in lines]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:
        return f.read().split()[2] != "Z"


def test_resident_shots_checked_and_replaced(binary):
    b = Bench(binary)
    try:
        s = Serve(b.g)
        r, added = b.run(s)
        assert r["imageEvidence"]["status"] == "available", r
        assert kinds(added) == ["start", "shot good", "shot good"], added
        first = int(added[0].split()[1])
        r, added = b.run(s)
        assert r["imageEvidence"]["status"] == "available" and kinds(added) == ["shot good", "shot good"], added

        # Success said, but the file is no PNG: the shot fails its check (a failed before-snapshot
        # refuses the run: nothing ran, spec/guest.md §10).
        b.set("bad-file")
        r, added = b.run(s)
        assert kinds(added) == ["shot bad-file"], added
        assert "does not start with the PNG signature" in b.journal()
        assert r["imageEvidence"]["status"] != "available", r

        # A failure answer: the shot is taken again the one-shot way; the resident one stays.
        b.set("fail")
        r, added = b.run(s)
        assert r["imageEvidence"]["status"] == "available", r
        assert kinds(added) == ["shot fail", "oneshot", "shot fail", "oneshot"], added
        assert alive(first)

        # An answer for another path: out of step, killed, the shot one-shot, a new one next run.
        b.set("stale")
        r, added = b.run(s)
        assert r["imageEvidence"]["status"] == "available", r
        assert kinds(added) == ["shot stale", "oneshot", "oneshot"], added
        time.sleep(0.2)
        assert not alive(first)
        b.set("good")
        r, added = b.run(s)
        assert kinds(added) == ["start", "shot good", "shot good"], added
        second = int(added[0].split()[1])
        assert second != first

        # No answer within the capture's limit: killed, the shot fails as a timed-out capture.
        b.set("hang")
        t0 = time.monotonic()
        r, added = b.run(s, timeout_ms=1500)
        assert time.monotonic() - t0 < 20
        assert kinds(added)[:1] == ["shot hang"], added
        assert "capture timed out after 1500 ms" in b.journal()
        time.sleep(0.2)
        assert not alive(second)

        rc, err = s.close()
        assert rc == 0, err
    finally:
        b.g.close()


def test_resident_capture_off_and_serve_end(binary):
    b = Bench(binary)
    try:
        s = Serve(b.g, env={"RELAY_RECEIVER_CAPTURE_RESIDENT": "off"})
        r, added = b.run(s)
        assert r["imageEvidence"]["status"] == "available", r
        assert kinds(added) == ["oneshot", "oneshot"], added
        s.close()
        s = Serve(b.g)
        r, added = b.run(s)
        pid = int(added[0].split()[1])
        assert alive(pid)
        rc, err = s.close()  # end of input: serve ends, and its resident program with it
        assert rc == 0, err
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
    finally:
        b.g.close()


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
