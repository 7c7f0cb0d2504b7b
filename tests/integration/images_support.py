"""images_support: what the saved-image integration tests share (test_images_*.py).

They drive the real mcp-relay binary over the fault shim wrapping reference-machine
(tests/plugins/machine-faultshim over plugins/reference-machine, whose "guest" is a folder on this
host and whose commands run here) with the test capture
plugin tests/plugins/capture-fake, selected through an environment profile (VM_ENVIRONMENT_FILE
with relayPlugins), so that real runs take real snapshots through the real guest receiver:
each snapshot copies <capture dir>/before.png or after.png.

    env = ImagesEnv(binary)                 # skips when a plugin or the receiver is not built
    env.set_capture(before=png(40, 30), after=png(40, 30, seed=2))
    with env.relay() as r:
        r.initialize()
        g = env.acquire_staged(r, extractions=[...])
        run = env.run(r, g, "echo hi")       # structuredContent of relay_script
        res = env.image(r, g, {"source": "reference", "imageId": run["imageDelivery"]["image"]["imageId"]})
    env.cleanup()
"""

import base64
import hashlib
import json
import os
import struct
import subprocess
import time
import zlib

from lifecycle_support import Shim, structured
from support_common import lead_headline_rest
from relay_client import skip

# -- images ------------------------------------------------------------------------------------

def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, seed=1, level=6):
    """An 8-bit RGB PNG of width x height with a pattern that depends on `seed`."""
    rows = []
    distinct = {}
    for y in range(height):
        key = (y * 7 + seed) & 0xFF
        row = distinct.get(key)
        if row is None:
            row = b"\x00" + bytes(v for x in range(width)
                                  for v in ((x * 3 + key) & 0xFF, (x + 2 * key) & 0xFF, (seed * 40 + key) & 0xFF))
            distinct[key] = row
        rows.append(row)
    raw = b"".join(rows)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, level)) + \
        _chunk(b"IEND", b"")


def png_header_only(width, height):
    """A CRC-valid PNG whose header declares width x height over a token IDAT."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + \
        _chunk(b"IEND", b"")


def png_size(data):
    """(width, height) from a PNG's IHDR."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % data[:8]
    return struct.unpack(">II", data[16:24])


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# -- results -----------------------------------------------------------------------------------

def delivery(result):
    return structured(result)["imageDelivery"]


def headline(result):
    return lead_headline_rest(result["content"][0]["text"])[1]


def image_block(result):
    blocks = [c for c in result["content"] if c["type"] == "image"]
    assert len(blocks) <= 1, "more than one image block: %r" % [c["type"] for c in result["content"]]
    return blocks[0] if blocks else None


def preview_bytes(result):
    block = image_block(result)
    assert block is not None, "no image block in %s" % result["content"][0]["text"][:2000]
    assert not block["data"].startswith("data:"), "the image block has a data: prefix"
    return base64.b64decode(block["data"], validate=True)


def check_attached(result, mime="image/png"):
    """Asserts an attached delivery: not an error, the headline first, the image block after
    the text with the presentation's MIME type, the preview's hash as the receipt says. Returns
    (imageDelivery, preview bytes)."""
    text = result["content"][0]["text"]
    assert result["isError"] is False, text[:3000]
    d = delivery(result)
    assert d["status"] == "attached", text[:3000]
    assert headline(result) == {"imageDelivery": d, "executionFailed": False}
    assert result["content"][0]["type"] == "text" and result["content"][1]["type"] == "image"
    block = image_block(result)
    assert block["mimeType"] == mime == d["presentation"]["mimeType"]
    data = preview_bytes(result)
    assert sha256(data) == d["presentation"]["sha256"]
    assert len(data) == d["presentation"]["bytes"]
    assert "imageDelivery" not in lead_headline_rest(text)[2], "the pretty JSON repeats imageDelivery"
    return d, data


def check_failed(result, status):
    """Asserts a delivery failure with `status`; returns imageDelivery."""
    text = result["content"][0]["text"]
    d = delivery(result)
    assert d["status"] == status, "expected %s, got %s" % (status, text[:3000])
    assert result["isError"] is True, text[:3000]
    s = structured(result)
    assert s["error"]["code"] == "delivery-" + status, s["error"]
    assert s["executionFailed"] is False
    assert d.get("diagnostic"), d
    assert headline(result) == {"imageDelivery": d, "executionFailed": False}
    return d


# -- the environment ---------------------------------------------------------------------------

class ImagesEnv(Shim):
    """A Shim whose relays select the shim and capture-fake through an environment profile."""

    def __init__(self, binary, session="s1"):
        super().__init__(binary, session=session)
        build = os.path.dirname(self.so)
        self.capture_so = os.path.join(build, "capture-fake.so")
        if not os.path.exists(self.capture_so):
            skip("capture-fake.so is not built (%s); build the capture-fake target" % self.capture_so)
        top = os.environ.get("RELAY_BUILD_DIR") or os.path.dirname(os.path.abspath(binary))
        receivers = os.path.join(top, "libexec", "mcp-relay", "receivers")
        if not os.path.isdir(receivers):
            skip("the guest receiver is not built (%s); build the receiver target" % receivers)
        self.capture_dir = os.path.join(self.root, "capture")
        os.makedirs(self.capture_dir, mode=0o700)
        env_root = os.path.join(self.root, "environment")
        for d in ("repository/images", "tart", "service", "image-state"):
            os.makedirs(os.path.join(env_root, d), mode=0o700)
        self.profile = os.path.join(self.root, "environment.json")
        with open(self.profile, "w") as f:
            json.dump({
                "schemaVersion": 2, "id": "images-test", "vmServiceUrl": "http://localhost:6240",
                "imageRepository": os.path.join(env_root, "repository"),
                "tartHome": os.path.join(env_root, "tart"),
                "serviceStateDir": os.path.join(env_root, "service"),
                "imageStateDir": os.path.join(env_root, "image-state"),
                "relayStateDir": self.state_dir,
                "machctlPath": "/bin/true", "tartPath": "/bin/true",
                "relayPlugins": {"machine": self.so, "transport": self.so, "capture": self.capture_so},
            }, f)

    def env(self, **extra):
        e = super().env(**extra)
        e.setdefault("VM_ENVIRONMENT_FILE", self.profile)
        e.setdefault("RELAY_FAKE_CAPTURE_DIR", self.capture_dir)
        e["MCP_RELAY_BACKEND"] = None
        return e

    def set_capture(self, before=None, after=None):
        """The bytes the next snapshots copy (None leaves a phase as it is)."""
        for name, data in (("before.png", before), ("after.png", after)):
            if data is not None:
                tmp = os.path.join(self.capture_dir, name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(self.capture_dir, name))

    def fail_capture(self, phase, on=True):
        path = os.path.join(self.capture_dir, "fail-" + phase)
        if on:
            open(path, "w").close()
        elif os.path.exists(path):
            os.unlink(path)

    # -- calls -----------------------------------------------------------------------------

    def acquire_staged(self, r, **acquire_args):
        args = {"task": "shots", "image": self.IMAGES[self.inner], "extractions": []}
        args.update(acquire_args)
        res = r.call_tool("relay_acquire", args)
        assert res["isError"] is False, res["content"][0]["text"][:2000]
        g = structured(res)
        res = r.call_tool("relay_stage", {"guest": g["guest"]}, timeout=180)
        assert res["isError"] is False, res["content"][0]["text"][:3000]
        g.update(structured(res))
        return g

    def run(self, r, g, code, expect_error=False, **extra):
        args = {"guest": g["guest"], "language": "shell", "inline": True, "code": code}
        args.update(extra)
        res = r.call_tool("relay_script", args, timeout=180)
        if not expect_error:
            assert res["isError"] is False, res["content"][0]["text"][:3000]
        return res

    def image(self, r, g, target, timeout=150):
        return r.call_tool("relay_image", {"guest": g["guest"] if isinstance(g, dict) else g, "target": target},
                           timeout=timeout)

    def wait_downloaded(self, g, execution_id, timeout=60):
        """Waits until the step download record of a run says downloaded; returns it."""
        path = os.path.join(g["evidencePath"], "host", "evidence-downloads", execution_id + ".json")
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(path) as f:
                    record = json.load(f)
                if record.get("status") in ("downloaded", "failed", "cancelled", "coalesced"):
                    return record
            except (FileNotFoundError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the step download of %s never ended (%s)" % (execution_id, path))
            time.sleep(0.05)

    def pulls(self, match):
        """The shim's logged pulls (their end lines, with "result") whose guest path contains `match`."""
        return [e for e in self.ended("pull") if match in (e.get("arg") or "")]

    def catalog_entry(self, g, image_id):
        path = os.path.join(self.session_dir, "image-catalog", g["purpose"], image_id + ".json")
        with open(path) as f:
            return json.load(f)


def display_target(run, phase):
    """The display selector of a run's result."""
    snaps = run["imageEvidence"]["snapshots"]
    return {"source": "display", "sessionId": snaps[0]["sessionId"] if snaps else "rec-0000000000000000",
            "executionId": run["executionId"], "phase": phase}


def chattr_immutable(path, on):
    """Sets or clears the immutable attribute (needs CAP_LINUX_IMMUTABLE and a file system that
    supports it). Returns False when that is not possible here."""
    try:
        done = subprocess.run(["chattr", "+i" if on else "-i", path], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        return False
    return done.returncode == 0
