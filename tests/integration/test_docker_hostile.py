#!/usr/bin/env python3
"""machine-docker against a hostile guest with a forging receiver (issue 22, defect 5).

The engine pulls as root and follows links in the folders of a path. A guest that cannot
read /root/secret (root, 0600) makes `out/deep -> /root`, and its receiver — replaced by a
wrapper, as a compromised guest would — reports `out/deep/secret` as a plain file with the
true size and SHA-256 (it scans a decoy with the same bytes). The declared output
`out/deep/secret` must still not come home: machine-docker asks the engine for the stat of
every folder above a pulled path and refuses a link, whatever the receiver said. Before the
fix only the last component was checked, and the root-only file arrived in the evidence.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from docker_support import Engine, acquire, diag, plugin_missing, structured, text_of  # noqa: E402

SECRET = b"root-only secret 7f3c9a\n"

# Every command goes to the real receiver; a scan of .../deep/secret scans the decoy instead.
FORGER = r'''#!/bin/sh
R="$(dirname "$0")"
if [ "$1" = scan ]; then
  for a do
    shift
    case "$a" in
      *deep/secret) a="${a%deep/secret}decoy/secret" ;;
    esac
    set -- "$@" "$a"
  done
fi
exec "$R/receiver.real" "$@"
'''


def files_with(root, data):
    """The files under root whose bytes are exactly `data`."""
    hits = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            try:
                with open(p, "rb") as f:
                    if f.read() == data:
                        hits.append(p)
            except OSError:
                pass
    return hits


def test_forging_receiver_cannot_pull_through_a_linked_folder(binary):
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        images = {"minimal": eng.image("minimal")}
        with eng.relay(binary, images) as r:
            r.initialize()
            g = acquire(r, "minimal", extractions=[{"name": "secret", "path": "out/deep/secret"}])
            name, vm, root = g["guest"], g["vm"], g["guestRoot"]
            res = r.call_tool("relay_stage", {"guest": name}, timeout=300)
            assert res["isError"] is False, text_of(res)
            eng.put_file(vm, "/root", "secret", SECRET, mode=0o600)
            # The guest cannot read it itself.
            s = diag(r, name, "cat /root/secret; echo rc=$?")
            assert "rc=0" not in str(s["output"]), s["output"]
            script = ("set -e\ncd %(W)s\nmkdir -p out/decoy\nprintf '%%s\\n' '%(secret)s' > out/decoy/secret\n"
                      "ln -s /root out/deep\n"
                      "cp %(R)s/receiver %(R)s/receiver.real\n"
                      "cat > %(R)s/receiver.tmp <<'RELAY_EOF'\n%(sh)sRELAY_EOF\n"
                      "chmod 700 %(R)s/receiver.tmp\nmv %(R)s/receiver.tmp %(R)s/receiver\n"
                      % {"W": g["workspace"], "R": root, "secret": SECRET.decode().strip(), "sh": FORGER})
            s = diag(r, name, script)
            assert s["outcome"]["exitStatus"]["code"] == 0, s
            res = r.call_tool("relay_extract", {"guest": name, "names": ["secret"]}, timeout=300)
            text = text_of(res)
            assert res["isError"] is True, text
            assert "symbolic link" in text and "/out/deep" in text, text
            leaked = files_with(r.project, SECRET)
            assert leaked == [], leaked
            # The guest is kept after the refusal.
            st = structured(r.call_tool("relay_status"))
            assert [x["guest"] for x in st["guests"]] == [name], st["guests"]
            assert r.call_tool("relay_release", {"guest": name}, timeout=300)["isError"] is False


if __name__ == "__main__":
    run_tests(globals())
