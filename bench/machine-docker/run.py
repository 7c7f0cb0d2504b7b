#!/usr/bin/env python3
"""bench/machine-docker/run.py — the machine-docker benchmarks (README.md).

Builds relay_core and machine-docker (RelWithDebInfo, no sanitizers, no tests) in $BUILD,
links md_bench.c against relay_core with cc, starts an engine of its own with the integration
tests' fixture (tests/integration/docker_support.py: Podman's API service, or dockerd with
ENGINE=docker), imports the "minimal" test image, and runs md_bench against the engine's CLI
talking to that same service:

    sudo bench/machine-docker/run.py          (BUILD, STATE, DATA, ROUNDS, ENGINE may be set)
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("SRC") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD") or os.path.join(REPO, "build-bench")
STATE = os.environ.get("STATE") or "/var/tmp/mcp-relay-md-bench-state"
DATA = os.environ.get("DATA") or "/var/tmp/mcp-relay-ml-bench-data"  # shared with bench/machine-local
ROUNDS = os.environ.get("ROUNDS") or "5"
ENGINE = os.environ.get("ENGINE") or "podman"

sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import docker_support  # noqa: E402


def main():
    if os.geteuid() != 0:
        print("run.py: run as root (the engine fixture is rootful)", file=sys.stderr)
        return 2
    subprocess.run(["cmake", "-S", REPO, "-B", BUILD, "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DRELAY_BUILD_TESTS=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-C", BUILD, "relay_core", "machine-docker", "-j2"], check=True,
                   stdout=subprocess.DEVNULL)
    libs = subprocess.run(["pkg-config", "--libs", "json-c", "libcrypto", "libarchive", "libcurl", "libpng"],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    exe = os.path.join(BUILD, "md_bench")
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(REPO, "core/src"),
                    "-I" + os.path.join(REPO, "core/include"), os.path.join(HERE, "md_bench.c"),
                    os.path.join(BUILD, "core/librelay_core.a"), os.path.join(BUILD, "support/librelay_support.a")] + libs + ["-lpthread", "-ldl", "-lm", "-o", exe],
                   check=True)
    shutil.rmtree(STATE, ignore_errors=True)
    eng = docker_support.Engine(ENGINE)
    try:
        image = eng.image("minimal")
        opts = {"endpoint": eng.endpoint, "images": {"bench": image}, "display": "off"}
        if eng.runtime:
            opts["runtime"] = eng.runtime
        if ENGINE == "docker":
            cli = "docker -H " + eng.endpoint
        else:
            cli = "podman --url " + eng.endpoint
        ver = subprocess.run(cli.split() + ["version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
        print("machine: %d cores, %s; engine %s %s (%s)" % (os.cpu_count(), " ".join(os.uname()[2:3]), ENGINE, ver,
                                                          eng.runtime or "default runtime"), flush=True)
        return subprocess.run([exe, os.path.join(BUILD, "lib/mcp-relay/plugins/machine-docker.so"), STATE,
                               json.dumps(opts), DATA, cli, ROUNDS]).returncode
    finally:
        eng.remove_all(os.path.join(STATE))
        eng.close()


if __name__ == "__main__":
    sys.exit(main())
