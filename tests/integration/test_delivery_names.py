#!/usr/bin/env python3
"""Output names with non-ASCII letters and with "~" come home (issue 22, defects 3 and 4).

A declared file `out/café.txt`, and a declared folder holding `café.txt`, `naïve/ü.txt` and
names with "~" (`a~b.txt`, `~~~`, `ab~`, `~.txt`: Podman sends a path's stat in the URL-safe base64
alphabet, where these bytes give "-" and "_"), are extracted with relay_extract and again by
relay_finish, on every backend that can run here: machine-local, the fake with transfer-ssh
against a real sshd, and machine-docker on Podman. Each file arrives with its name and bytes.

Before: libarchive, in the "C" locale every relay runs in (nothing calls setlocale), refused
the pax name "café.txt" ("Pathname can't be converted from UTF-8 to current locale") in every
archive reader of the core and the plugins, whatever LANG was; and machine-docker's base64
decoder skipped "-" and "_", so Podman's stat of some names with "~" was "the engine sent no
stat".
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402
from runs_support import make_variant, stage, structured, text_of  # noqa: E402

FILES = {"out/café.txt": b"cafe\n", "out/naïve/ü.txt": b"umlaut\n", "out/a~b.txt": b"tilde\n",
         "out/~~~": b"three tildes\n", "out/ab~": b"tilde at the end\n", "out/~.txt": b"tilde first\n"}
# Single files are pulled by their own name (a folder comes home as one receiver archive).
SINGLE = {"cafe": "out/café.txt", "tilde3": "out/~~~", "tildeend": "out/ab~"}
DECL = [{"name": k, "path": v} for k, v in SINGLE.items()] + [{"name": "outdir", "path": "out"}]


def shell_script():
    lines = ["set -e", "mkdir -p out/naïve"]
    for rel, data in FILES.items():
        lines.append("printf '%%s\\n' '%s' > '%s'" % (data.decode().rstrip("\n"), rel))
    return "\n".join(lines) + "\n"


def check_files(root):
    got = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                got[os.path.relpath(os.path.join(dirpath, n), root)] = f.read()
    return got


def extracted(answer, name):
    for e in answer["extractions"]:
        if e["name"] == name:
            return e
    raise AssertionError("no extraction %s in %s" % (name, answer))


def exercise(r, acquire):
    g = acquire()
    name = g["guest"]
    res = stage(r, name)
    assert res["isError"] is False, text_of(res)
    run = r.call_tool("relay_script", {"guest": name, "language": "shell", "inline": True,
                                       "code": "cd %s\n%s" % (g["workspace"], shell_script())}, timeout=300)
    assert run["isError"] is False, text_of(run)
    assert structured(run)["outcome"]["exitStatus"]["code"] == 0, text_of(run)
    res = r.call_tool("relay_extract", {"guest": name, "names": [d["name"] for d in DECL]}, timeout=300)
    assert res["isError"] is False, text_of(res)
    ans = structured(res)
    for key, rel in SINGLE.items():
        one = extracted(ans, key)
        want = {os.path.basename(rel): FILES[rel]}
        assert check_files(one["destination"]) == want, (check_files(one["destination"]), json.dumps(one))
    folder = extracted(ans, "outdir")["destination"]
    want = {rel[len("out/"):]: data for rel, data in FILES.items()}
    assert check_files(folder) == want, (check_files(folder), want)
    res = r.call_tool("relay_finish", {"guest": name}, timeout=600)
    assert res["isError"] is False, text_of(res)
    return structured(res)


def test_names_machine_local(binary):
    v, why = make_variant(binary, "local")
    if v is None:
        skip(why)
    try:
        with v.relay(LANG="C", LC_ALL="C") as r:
            r.initialize()
            exercise(r, lambda: v.acquire(r, extractions=DECL))
    finally:
        v.cleanup()


def test_names_ssh(binary):
    v, why = make_variant(binary, "ssh")
    if v is None:
        skip(why)
    try:
        with v.relay(LANG="C", LC_ALL="C") as r:
            r.initialize()
            exercise(r, lambda: v.acquire(r, extractions=DECL))
    finally:
        v.cleanup()


def test_names_machine_docker(binary):
    from docker_support import Engine, acquire, plugin_missing
    why = plugin_missing(binary)
    if why:
        skip(why)
    with Engine() as eng:
        images = {"full": eng.image("full")}
        with eng.relay(binary, images, LANG="C", LC_ALL="C") as r:
            r.initialize()
            exercise(r, lambda: acquire(r, "full", extractions=DECL))


if __name__ == "__main__":
    run_tests(globals())
