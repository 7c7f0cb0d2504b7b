#!/usr/bin/env bash
# bench/machine-local/run.sh — the machine-local benchmarks (README.md).
# Builds relay_core and the machine-local plugin (RelWithDebInfo, no
# sanitizers, no tests) in $BUILD, links the driver ml_bench.c against
# relay_core with cc, and runs it as root:
#
#   sudo bench/machine-local/run.sh      (BUILD, STATE, DATA, ROUNDS may be set)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${SRC:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$REPO/build-bench}
STATE=${STATE:-/var/tmp/mcp-relay-ml-bench-state}
DATA=${DATA:-/var/tmp/mcp-relay-ml-bench-data}
ROUNDS=${ROUNDS:-5}

if [ "$(id -u)" != 0 ]; then
	echo "run.sh: run as root (machine-local makes namespaces and overlays)" >&2
	exit 2
fi
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_BUILD_TESTS=OFF >/dev/null
make -C "$BUILD" relay_core machine-local -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I"$REPO/core/src" -I"$REPO/core/include" "$HERE/ml_bench.c" \
	"$BUILD/core/librelay_core.a" "$BUILD/support/librelay_support.a" $(pkg-config --libs json-c libcrypto libarchive libcurl libpng zlib) \
	-lpthread -ldl -lm -o "$BUILD/ml_bench"
echo "machine: $(nproc) cores, $(uname -sr), $(. /etc/os-release && echo "$PRETTY_NAME")"
echo "helpers: slirp4netns $(slirp4netns --version 2>/dev/null | head -1 | awk '{print $3}'), Xvfb $(dpkg-query -W -f '${Version}' xvfb 2>/dev/null), tar $(tar --version | head -1 | awk '{print $4}')"
"$BUILD/ml_bench" "$BUILD/lib/mcp-relay/plugins/machine-local.so" "$STATE" "$DATA" "$ROUNDS"
