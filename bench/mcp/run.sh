#!/bin/sh
# bench/mcp/run.sh — mcp-relay against the Node MCP anchor (the official TypeScript SDK 1.32.2
# serving the same fourteen tools), with the project's generic driver, in one sitting,
# alternating A B A B ..., medians and ratios.
#
# Usage: bench/mcp/run.sh [runs] [mcp-relay binary]     (default 5 runs; builds the binary)
# Needs: cmake, a C compiler and the build dependencies; Node.js 18+ and npm (the anchor's
# node_modules is installed here once with `npm ci`, never committed); Python 3.
#
# Without a binary argument the script configures build-bench-mcp/ (RelWithDebInfo, no
# sanitizers, no tests) and builds mcp-relay and the plugins, so the relay starts exactly as
# installed: plugins load on the first call that needs a backend (relay_status needs none).
set -eu

RUNS=${1:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ANCHOR=$HERE/node-anchor

if [ $# -ge 2 ]; then
	BINARY=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
else
	BUILD=$ROOT/build-bench-mcp
	cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_SANITIZE=OFF \
		-DRELAY_BUILD_TESTS=OFF >/dev/null
	targets=mcp-relay
	for p in machine-local machine-service transfer-ssh capture-cua capture-x11 console-vnc; do
		[ -f "$ROOT/plugins/$p/CMakeLists.txt" ] && targets="$targets $p"
	done
	# shellcheck disable=SC2086
	make -C "$BUILD" -j"$(nproc)" $targets >/dev/null
	BINARY=$BUILD/mcp-relay
fi

command -v node >/dev/null 2>&1 || { echo "node is not installed (Node.js 18+ is needed for the anchor)" >&2; exit 1; }
if [ ! -d "$ANCHOR/node_modules/@modelcontextprotocol/sdk" ]; then
	(cd "$ANCHOR" && npm ci --no-audit --no-fund >&2) ||
		{ echo "npm ci failed in $ANCHOR: the npm registry must be reachable once" >&2; exit 1; }
fi

WORK=$(mktemp -d /tmp/relay-bench-mcp-XXXXXX)
trap 'rm -rf "$WORK"' EXIT INT TERM
mkdir -m 700 "$WORK/state" "$WORK/project"
OUT=${BENCH_OUT:-$HERE/results.jsonl}

# The relay's settings: a private state folder and project; defaults for everything else.
cd "$ANCHOR"
env MCP_RELAY_STATE_DIR="$WORK/state" MCP_RELAY_PROJECT="$WORK/project" TMPDIR="$WORK" \
	python3 bench_mcp.py --repeat "$RUNS" --table --vs 'node server.mjs' "$BINARY" >"$OUT" 2>"$WORK/table.md" || true

echo "mcp-relay ($BINARY) against node server.mjs, $RUNS runs each, alternating ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
echo "host: $(nproc) cores, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); node $(node --version)"
echo
cat "$WORK/table.md"
echo
python3 - "$OUT" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = lines[-1]
a, b, ratio = summary["summary"], summary["summary_b"], summary["ratio_median_a_over_b"]
def show(key, label, target, better_low):
    r = ratio[key]
    ok = r <= target if better_low else r >= target
    print("| %s | %s | %s | %.4f | %s %s | %s |" % (label, a[key]["median"], b[key]["median"], r,
          "<=" if better_low else ">=", target, "met" if ok else "NOT met"))
print("| target | mcp-relay median | node median | ratio | target | verdict |")
print("|---|---:|---:|---:|---|---|")
show("init_ms", "spawn -> initialize (ms)", 1 / 50, True)
show("peak_rss_kb", "peak RSS (KiB)", 1 / 15, True)
show("pipe_calls_per_s", "pipelined calls/s", 6, False)
failed = sorted({c for l in lines[:-1] if l.get("side") == "A" for c in l.get("checks_failed", [])})
print()
print("driver checks failed for mcp-relay: %s" % (", ".join(failed) or "none"))
PY
