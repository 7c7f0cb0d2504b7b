#!/usr/bin/env bash
# bench/house/wall.sh — the wall-clock rows of bench/README.md for issue 26, the build before
# (BEFORE_TREE, default /work/wt-before, built by run.sh) and this tree's build-bench/,
# alternating before / after in one sitting, each row with its folder's own driver. Drivers that
# link against relay_core (ml_bench.c, md_bench.c, hash_bench.c, preview_bench.c) are each
# tree's own; the MCP drivers (bench_runs.py, bench_ab_builds.py) are this tree's for both
# builds, so the same code measures both (bench_runs.py is each tree's own: see below). Prints the load average before every measurement.
#
#   sudo bench/house/wall.sh [ROUNDS] [ROWS...]     (ROUNDS of before/after pairs, default 2;
#   ROWS from: local runs ab manifest image x11shot docker; default all)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
AFTER_TREE=$(cd "$HERE/../.." && pwd)
BEFORE_TREE=${BEFORE_TREE:-/work/wt-before}
WORK=${WORK:-/tmp/relay-bench-house}
PAIRS=${1:-2}
shift || true
ROWS=${*:-local runs ab manifest image x11shot docker}
tree() { if [ "$1" = before ]; then echo "$BEFORE_TREE"; else echo "$AFTER_TREE"; fi; }
load() { echo "=== $1 $2 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }

for row in $ROWS; do
	if [ "$row" = ab ]; then # interleaved run by run: one sitting by construction
		load ab both
		python3 "$AFTER_TREE/bench/runs/bench_ab_builds.py" "$BEFORE_TREE/build-bench/mcp-relay" \
			"$AFTER_TREE/build-bench/mcp-relay" 30 || echo "=== ab: the driver failed (exit $?)"
		continue
	fi
	for i in $(seq 1 "$PAIRS"); do
		for side in before after; do
			t=$(tree $side)
			b=$t/build-bench
			load "$row" "$side"
			rc=0
			case $row in
			local) SRC=$t BUILD=$b ROUNDS=3 "$t/bench/machine-local/run.sh" ;;
			runs) # each tree's own driver: this tree's harness wants tests/plugins/machine-faultshim,
				# which issue 26 brought (run.sh builds it here)
				RELAY_BUILD_DIR=$b python3 "$t/bench/runs/bench_runs.py" --binary "$b/mcp-relay" \
				--skip-stage --runs 15 --gui-runs 10 ;;
			manifest) BUILD=$b ROUNDS=3 "$t/bench/manifest/run.sh" ;;
			image) # the before-tree's bench/image/run.sh compiles without support/'s include
				# folders and fails; run.sh here built the same driver for both trees.
				for k in 1 2 3 4 5; do
					s0=$(date +%s%N)
					"$WORK/preview_bench.$side" "$WORK/in.png" "$WORK/wall.$side.png" >/dev/null
					s1=$(date +%s%N)
					convert-im6.q16 "$WORK/in.png" -resize 2000x2000 "$WORK/wall.im.png"
					s2=$(date +%s%N)
					echo "preview $side $(((s1 - s0) / 1000000)) ms, convert $(((s2 - s1) / 1000000)) ms"
				done ;;
			x11shot) "$AFTER_TREE/bench/x11shot/run.sh" "$b" 7 ;;
			docker) # this tree's run.py (it links the support library, which the before-tree's
				# forgot), SRC= the tree whose relay_core and fixture it uses
				SRC=$t BUILD=$b ROUNDS=3 MD_BENCH_ACQUIRE_ONLY=1 python3 "$AFTER_TREE/bench/machine-docker/run.py" ;;
			esac || rc=$?
			[ $rc = 0 ] || echo "=== $row $side: the driver failed (exit $rc)"
		done
	done
done
