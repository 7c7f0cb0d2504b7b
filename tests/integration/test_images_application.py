"""relay_image application selector (spec/images.md §1.2, §4, §9): files of outputs declared at
relay_acquire, read through the guest receiver's `scan --image` and pulled one by one.

The fake guest's workspace is a folder on this host, so the tests write the "guest's" files
directly, as a script in the guest would.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from images_support import (ImagesEnv, check_attached, check_failed, delivery, image_block, png,
                            png_header_only, sha256)
from lifecycle_support import structured
from relay_client import run_tests

DECLARED = [
    {"name": "shot", "path": "out/shot.png"},
    {"name": "shots", "path": "out/shots"},
    {"name": "photo", "path": "out/photo.jpg"},
    {"name": "anim", "path": "out/anim.gif"},
]


def write(ws, rel, data):
    path = os.path.join(ws, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def jpeg_bytes(tmp):
    """A small baseline JPEG made by ImageMagick, or None when it is not installed."""
    convert = shutil.which("convert") or shutil.which("magick")
    if convert is None:
        return None
    out = os.path.join(tmp, "x.jpg")
    subprocess.run([convert, "-size", "24x16", "xc:#3366cc", out], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(out, "rb") as f:
        return f.read()


def test_file_and_directory_declarations(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay(RELAY_FAKE_CAPTURE_DIR=None) as r:
            r.initialize()
            g = env.acquire_staged(r, extractions=DECLARED)
            ws = g["workspace"]
            shot = png(30, 20, seed=3)
            nested = png(16, 16, seed=4)
            write(ws, "out/shot.png", shot)
            write(ws, "out/shots/a/b.png", nested)
            write(ws, "out/shots/sibling.png", png(8, 8, seed=9))

            res = env.image(r, g, {"source": "application", "name": "shot"})
            d, preview = check_attached(res)
            image = d["image"]
            assert preview == shot
            assert image["source"] == "application" and image["name"] == "shot" and "path" not in image
            assert image["enclosure"] == g["purpose"] and image["mimeType"] == "image/png"
            assert image["sha256"] == sha256(shot) and image["bytes"] == len(shot)
            assert image["retrievedAt"].endswith("Z")
            assert image["originalPath"] == os.path.join(g["evidencePath"], "host", "images", image["imageId"],
                                                         "original.png")
            with open(image["originalPath"], "rb") as f:
                assert f.read() == shot
            entry = env.catalog_entry(g, image["imageId"])
            assert entry["remote"] == os.path.join(ws, "out/shot.png")
            assert entry["fileName"] == "shot.png"
            assert "retrievedAt" not in entry["descriptor"]

            res = env.image(r, g, {"source": "application", "name": "shots", "path": "a/b.png"})
            d, preview = check_attached(res)
            assert preview == nested and d["image"]["path"] == "a/b.png" and d["image"]["name"] == "shots"
            # only the named file was read: the sibling never crossed
            assert not env.pulls("sibling.png")
            assert len(env.pulls("out/shots/a/b.png")) == 1
            # the guest's transient image facts were removed
            assert not [n for n in os.listdir(g["guestRoot"]) if n.startswith(".inventory-")]

            # the same bytes again are the same image, read from the host
            pulls = len(env.pulls("out/shot.png"))
            d2, _ = check_attached(env.image(r, g, {"source": "application", "name": "shot"}))
            assert d2["image"]["imageId"] == image["imageId"]
            assert len(env.pulls("out/shot.png")) == pulls
            # a changed file is a new image; the old reference keeps its bytes
            changed = png(30, 20, seed=6)
            write(ws, "out/shot.png", changed)
            d3, preview = check_attached(env.image(r, g, {"source": "application", "name": "shot"}))
            assert d3["image"]["imageId"] != image["imageId"] and preview == changed
            d4, preview = check_attached(env.image(r, g, {"source": "reference", "imageId": image["imageId"]}))
            assert preview == shot and d4["image"]["sha256"] == sha256(shot)
    finally:
        env.cleanup()


def test_declaration_rules(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay(RELAY_FAKE_CAPTURE_DIR=None) as r:
            r.initialize()
            g = env.acquire_staged(r, extractions=DECLARED)
            ws = g["workspace"]
            write(ws, "out/shot.png", png(10, 10))
            write(ws, "out/shots/a.png", png(10, 10, seed=2))

            d = check_failed(env.image(r, g, {"source": "application", "name": "secret"}),
                             "unauthorized-reference")
            assert "shot, shots, photo, anim" in d["diagnostic"]
            # a directory declaration needs a path; a file declaration takes none
            check_failed(env.image(r, g, {"source": "application", "name": "shots"}), "unsafe-path")
            check_failed(env.image(r, g, {"source": "application", "name": "shot", "path": "x.png"}),
                         "unsafe-path")
            for bad in ("../shot.png", "/etc/passwd.png", "a/../../x.png", "a//b.png", "./a.png", "a\\b.png"):
                res = env.image(r, g, {"source": "application", "name": "shots", "path": bad})
                assert "imageDelivery" in structured(res), (bad, res["content"][0]["text"][:500])
                check_failed(res, "unsafe-path")
            # a symbolic link on the way
            os.symlink(os.path.join(ws, "out/shots"), os.path.join(ws, "out/shots/loop"))
            check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "loop/a.png"}),
                         "unsafe-path")
            os.symlink("a.png", os.path.join(ws, "out/shots/link.png"))
            check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "link.png"}),
                         "unsafe-path")
            # nothing there
            d = check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "none.png"}),
                             "image-missing")
            assert "none.png" in d["diagnostic"]
            check_failed(env.image(r, g, {"source": "application", "name": "photo"}), "image-missing")
    finally:
        env.cleanup()


def test_types_and_limits(binary):
    env = ImagesEnv(binary)
    try:
        with env.relay(RELAY_FAKE_CAPTURE_DIR=None) as r:
            r.initialize()
            g = env.acquire_staged(r, extractions=DECLARED)
            ws = g["workspace"]
            gif = b"GIF89a" + b"\x01\x00\x01\x00\x00\x00\x00;"
            write(ws, "out/anim.gif", gif)
            d = check_failed(env.image(r, g, {"source": "application", "name": "anim"}),
                             "presentation-unavailable")
            assert "only PNG, JPEG and WebP images are supported" in d["diagnostic"]

            jpeg = jpeg_bytes(env.root)
            if jpeg is not None:
                write(ws, "out/photo.jpg", jpeg)
                res = env.image(r, g, {"source": "application", "name": "photo"})
                d, preview = check_attached(res, mime="image/jpeg")
                assert preview == jpeg and d["image"]["mimeType"] == "image/jpeg"
                assert d["image"]["originalPath"].endswith("/original.jpg")
                # JPEG bytes under a .png name are refused
                write(ws, "out/shots/liar.png", jpeg)
                d = check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "liar.png"}),
                                 "presentation-unavailable")
                assert "do not match its extension" in d["diagnostic"]
            else:
                print("note: ImageMagick's convert is not installed; the JPEG cases were not run")

            # declared 100000 x 100000: refused from the header, before any decoding
            huge = png_header_only(100000, 100000)
            write(ws, "out/shots/huge.png", huge)
            res = env.image(r, g, {"source": "application", "name": "shots", "path": "huge.png"})
            d = check_failed(res, "presentation-unavailable")
            assert image_block(res) is None
            assert "40000000" in d["diagnostic"].replace(",", "") or "32768" in d["diagnostic"].replace(",", ""), d
            # it is still evidence: the original was published untouched
            with open(d["image"]["originalPath"], "rb") as f:
                assert f.read() == huge

            # truncated and damaged PNGs
            good = png(50, 40, seed=8)
            write(ws, "out/shots/cut.png", good[: len(good) // 2])
            check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "cut.png"}),
                         "presentation-unavailable")
            damaged = bytearray(good)
            damaged[60] ^= 0xFF  # inside IDAT: the chunk CRC no longer matches
            write(ws, "out/shots/crc.png", bytes(damaged))
            d = check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "crc.png"}),
                             "presentation-unavailable")
            assert "CRC" in d["diagnostic"] or "crc" in d["diagnostic"], d

            # over 64 MiB: the guest's scan refuses it (a sparse file is enough)
            path = write(ws, "out/shots/big.png", png(4, 4))
            with open(path, "r+b") as f:
                f.truncate(64 * 1024 * 1024 + 1)
            d = check_failed(env.image(r, g, {"source": "application", "name": "shots", "path": "big.png"}),
                             "presentation-unavailable")
            assert "64 MiB" in d["diagnostic"]
            assert not env.pulls("big.png")
    finally:
        env.cleanup()


if __name__ == "__main__":
    run_tests(globals())
