#!/bin/sh
# Runs the runs benchmarks (bench/runs/README.md): relay_script of `true` against a raw
# multiplexed `ssh host true`, and relay_stage of 512 MiB in 10,000 files against
# `tar | ssh` and `scp -r`, all through one real sshd on 127.0.0.1.
#   BUILD=<build dir> (default build-runs-bench, configured RelWithDebInfo here)
#   RUNS=<relay_script rounds> (default 30)  STAGES=<relay_stage rounds> (default 8)
#   DATA=<folder for the 512 MiB workspace> (default /var/tmp/relay-runs-bench-data)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${BUILD:-$src/build-runs-bench}
if [ "$(id -u)" != 0 ]; then
	echo "bench/runs needs root (the sshd fixture logs in as root)" >&2
	exit 2
fi
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_SANITIZE=OFF >/dev/null
make -C "$build" -j"$(nproc)" >/dev/null
RELAY_BUILD_DIR=$build exec python3 "$here/bench_runs.py" --binary "$build/mcp-relay" "$@"
