"""support_common: the helpers every *_support.py module shares (where the build put the
binary's plugins, reading a tool result, whether namespaces work here, the evidence events).
The support modules re-export them, so tests import them from whichever support module they
already use."""

import hashlib
import json
import os
import subprocess


def build_dir(binary):
    return os.environ.get("RELAY_BUILD_DIR") or os.path.dirname(os.path.abspath(binary))


def shim_so(binary):
    """tests/plugins/machine-faultshim: wraps a real machine plugin and injects faults by a script."""
    return os.path.join(build_dir(binary), "tests", "plugins", "machine-faultshim.so")


def plugin_so(binary, name):
    return os.path.join(build_dir(binary), "lib", "mcp-relay", "plugins", name + ".so")


def structured(result):
    return result["structuredContent"]


def full(result):
    """The whole structured result: the spill file when the text bounds cut it (spec/tools.md §5.2)."""
    s = result["structuredContent"]
    if s.get("resultTruncated"):
        with open(s["fullResult"]) as f:
            return json.load(f)
    return s


def text_of(result):
    return result["content"][0]["text"]


def lead_headline_rest(text):
    """relay_script and relay_image (spec/tools.md §2.3): the plain lead sentence (at most 200
    characters), the compact imageDelivery headline as an object, and the rest of the text."""
    lead, head, rest = (text.split("\n", 2) + ["", ""])[:3]
    assert 0 < len(lead) <= 200 and not lead.startswith("{"), "no lead sentence: %r" % text[:300]
    return lead, json.loads(head), rest


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def namespaces_missing():
    """Why machine-local cannot run here, or None."""
    # Without root machine-local makes a user namespace first (issue 21).
    userns = ["--user", "--map-root-user"] if os.geteuid() != 0 else []
    rc = subprocess.run(["unshare"] + userns + ["--mount", "--pid", "--net", "--uts", "--ipc", "--fork", "true"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    if rc != 0:
        return "this kernel or container does not allow new namespaces"
    with open("/proc/filesystems") as f:
        if "\toverlay" not in f.read():
            return "overlayfs is not available"
    return None


def events(evidence, kind=None):
    """The guest's events (host/events, then <evidence>.lifecycle-events), optionally of one kind."""
    out = []
    for folder in (os.path.join(evidence, "host", "events"), evidence + ".lifecycle-events"):
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue  # a durable write's temporary file
            with open(os.path.join(folder, name)) as f:
                e = json.load(f)
            if kind is None or e["kind"] == kind:
                out.append(e)
    return out


# The guest side of a resident receiver (spec/guest.md §17), for the tests that end or replace it.
def serve_pids_script(root):
    """A shell script printing the pids of the guest's `R/receiver serve` processes (by their root:
    an ssh guest of the fixture is this host, where other guests' receivers run too). Plain sh
    and tr only (the minimal container image has no grep)."""
    return ("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
            "case \"$c\" in '%s/receiver serve --root %s ') echo ${p#/proc/};; esac; done; true" % (root, root))


# A receiver's first line that answers serve the way one without it does (an older relay's usage error).
NO_SERVE = """if [ "$1" = serve ]; then echo '{"error":"usage: receiver version | run"}'; exit 2; fi
"""
