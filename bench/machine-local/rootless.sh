#!/usr/bin/env bash
# bench/machine-local/rootless.sh — acquire -> ready of the image local as root and as an
# ordinary user, in one sitting (issue 21: without root within 1.5x the root figure).
# Builds like run.sh, then alternates PAIRS times: ml_bench with ML_BENCH_ACQUIRE_ONLY=1 as
# root, then as USER (runuser; default relayci, who needs a range in /etc/subuid), and prints
# every sample, the medians and the ratio. /dev/net/tun is made 0666 (the kernel's default)
# for the run when it is not, so the user's guests get pasta, and restored afterwards.
#
#   sudo bench/machine-local/rootless.sh     (BUILD, ROUNDS, PAIRS, USER_NAME may be set)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${SRC:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$REPO/build-bench}
ROUNDS=${ROUNDS:-3}
PAIRS=${PAIRS:-3}
USER_NAME=${USER_NAME:-relayci}
ROOT_STATE=/var/tmp/mcp-relay-ml-bench-rootless-root
USER_STATE=/var/tmp/mcp-relay-ml-bench-rootless-$USER_NAME

if [ "$(id -u)" != 0 ]; then
	echo "rootless.sh: run as root (it measures root, then runs the same as $USER_NAME)" >&2
	exit 2
fi
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_BUILD_TESTS=OFF >/dev/null
make -C "$BUILD" relay_core machine-local -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I"$REPO/core/src" -I"$REPO/core/include" "$HERE/ml_bench.c" \
	"$BUILD/core/librelay_core.a" "$BUILD/support/librelay_support.a" $(pkg-config --libs json-c libcrypto libarchive libcurl libpng zlib) \
	-lpthread -ldl -lm -o "$BUILD/ml_bench"
chmod -R o+rX "$BUILD"
mkdir -p "$USER_STATE" && chown "$USER_NAME" "$USER_STATE" && chmod 0700 "$USER_STATE"
tun_mode=$(stat -c %a /dev/net/tun)
trap 'chmod "$tun_mode" /dev/net/tun' EXIT
chmod 0666 /dev/net/tun
echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp)
for pair in $(seq "$PAIRS"); do
	echo "== pair $pair: root" | tee -a "$out"
	ML_BENCH_ACQUIRE_ONLY=1 "$BUILD/ml_bench" "$BUILD/lib/mcp-relay/plugins/machine-local.so" "$ROOT_STATE" /nonexistent "$ROUNDS" | sed 's/^/root /' | tee -a "$out"
	echo "== pair $pair: $USER_NAME" | tee -a "$out"
	runuser -u "$USER_NAME" -- env ML_BENCH_ACQUIRE_ONLY=1 "$BUILD/ml_bench" "$BUILD/lib/mcp-relay/plugins/machine-local.so" "$USER_STATE" /nonexistent "$ROUNDS" | sed 's/^/user /' | tee -a "$out"
done
python3 - "$out" <<'EOF'
import statistics, sys
samples = {}
for line in open(sys.argv[1]):
    if " samples (ms):" not in line:
        continue
    who, rest = line.split(" ", 1)
    name, values = rest.split(" samples (ms):")
    samples.setdefault((who, name), []).extend(float(x) for x in values.split())
print("\n| measure | root median | without root median | ratio |\n|---|---|---|---|")
for name in ("acquire->ready, no display", "acquire->ready, Xvfb"):
    r, u = samples[("root", name)], samples[("user", name)]
    mr, mu = statistics.median(r), statistics.median(u)
    print("| %s (%d / %d guests) | %.1f ms | %.1f ms | %.2f x |" % (name, len(r), len(u), mr, mu, mu / mr))
EOF
rm -f "$out"
