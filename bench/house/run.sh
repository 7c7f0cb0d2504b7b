#!/usr/bin/env bash
# bench/house/run.sh — issue 26 ("the house"): the tree before the house work (2d938f7) against
# this tree, both RelWithDebInfo without sanitizers, in instruction counts (valgrind callgrind:
# deterministic, so the load of the shared 2-core machine does not move them). The wall-clock
# rows are measured with each folder's own run.sh, alternating the two builds (README.md here).
#
#   bench/house/run.sh [BEFORE_COMMIT]     (default 2d938f7; BEFORE_TREE, WORK may be set)
#
# Builds: a detached worktree of BEFORE_COMMIT at $BEFORE_TREE (default /work/wt-before, made if
# missing) and this tree, each into its own build-bench/ (-j2). Then, for each build, callgrind's
# total instructions (Ir) of:
#   status   mcp-relay over a fixed stdin: initialize + 2,000 pipelined relay_status (2,001 answers)
#   manifest hash_bench (bench/manifest) of a fixed tree: 64 files of 1 MiB, seeded bytes, 1 thread
#   preview  preview_bench (bench/image), compiled from each tree's own sources, of one 5120x2880 PNG
#   shot     relay-x11shot --out of a fixed 1280x800 scene on Xvfb (MIT-SHM if the build has it)
#   shot-getimage  the same with RELAY_X11SHOT_NO_SHM=1 (GetImage, the before-tree's only way)
# and, where the count moved, a per-function diff of the two (callgrind_annotate) in $WORK.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
AFTER_TREE=$(cd "$HERE/../.." && pwd)
BEFORE_COMMIT=${1:-2d938f7}
BEFORE_TREE=${BEFORE_TREE:-/work/wt-before}
WORK=${WORK:-/tmp/relay-bench-house}
mkdir -p "$WORK"

if [ ! -d "$BEFORE_TREE" ]; then
	git -C "$AFTER_TREE" worktree add --detach "$BEFORE_TREE" "$BEFORE_COMMIT" >&2
fi
for t in "$BEFORE_TREE" "$AFTER_TREE"; do
	cmake -S "$t" -B "$t/build-bench" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_SANITIZE=OFF \
		-DRELAY_BUILD_TESTS=OFF >/dev/null
	cmake --build "$t/build-bench" -j2 >/dev/null
	# The fault shim (issue 26) only: this tree's tests/integration harness wants it for the ssh
	# variant of bench/runs; the rest of the tests stay unbuilt.
	if [ -d "$t/tests/plugins/machine-faultshim" ]; then
		cmake -S "$t" -B "$t/build-bench" -DRELAY_BUILD_TESTS=ON >/dev/null
		cmake --build "$t/build-bench" -j2 --target machine-faultshim >/dev/null
		cmake -S "$t" -B "$t/build-bench" -DRELAY_BUILD_TESTS=OFF >/dev/null
	fi
done

# Fixed inputs, the same bytes for both builds.
python3 - "$WORK/status2000.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "house", "version": "1"}}}) + "\n")
    f.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    for i in range(1, 2001):
        f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                            "params": {"name": "relay_status", "arguments": {}}}) + "\n")
PY
if [ "$(find "$WORK/tree" -type f 2>/dev/null | wc -l)" != 64 ]; then
	rm -rf "$WORK/tree" && mkdir -p "$WORK/tree/a" "$WORK/tree/b"
	python3 - "$WORK/tree" <<'PY'
import random, sys
rnd = random.Random(26)
for i in range(64):
    with open("%s/%s/f%02d" % (sys.argv[1], "ab"[i % 2], i), "wb") as f:
        f.write(rnd.randbytes(1 << 20))
PY
fi
if [ ! -s "$WORK/in.png" ]; then
	W=5120 H=2880
	convert -size "${W}x${H}" gradient:'#2b5876-#4e4376' \
		\( -size $((W * 55 / 100))x$((H * 65 / 100)) xc:'#f5f5f5' -font DejaVu-Sans-Mono -pointsize 34 \
		-fill '#202020' -annotate +20+50 "$(sed -n '1,80p' "$HERE/run.sh" | tr -d '%')" \) -geometry +$((W / 24))+$((H / 18)) -composite \
		\( -size $((W / 5))x$((H / 4)) -seed 7 plasma:fractal -blur 0x1 \) \
		-geometry +$((W * 68 / 100))+$((H * 68 / 100)) -composite \
		\( -size "${W}x100" xc:'#303030' \) -geometry +0+$((H - 100)) -composite -depth 8 "$WORK/in.png"
fi
if [ ! -s "$WORK/scene.xwd" ]; then
	W=1280 H=800
	convert -size "${W}x${H}" gradient:'#2b5876-#4e4376' \
		\( -size $((W * 55 / 100))x$((H * 65 / 100)) xc:'#f5f5f5' -font DejaVu-Sans-Mono -pointsize 13 \
		-fill '#202020' -annotate +10+20 "$(sed -n '1,60p' "$HERE/run.sh" | tr -d '%')" \) -geometry +$((W / 24))+$((H / 18)) -composite \
		\( -size $((W / 5))x$((H / 4)) -seed 7 plasma:fractal -blur 0x1 \) \
		-geometry +$((W * 68 / 100))+$((H * 68 / 100)) -composite \
		\( -size "${W}x40" xc:'#303030' \) -geometry +0+$((H - 40)) -composite -depth 8 "$WORK/scene.png"
	convert "$WORK/scene.png" "$WORK/scene.xwd"
fi

# The drivers of bench/manifest and bench/image, built against each tree.
for side in before after; do
	t=$BEFORE_TREE
	[ $side = after ] && t=$AFTER_TREE
	b=$t/build-bench
	# shellcheck disable=SC2046
	cc -O2 -g -std=c11 -D_GNU_SOURCE -I"$t/core/src" -I"$t/core/include" "$t/bench/manifest/hash_bench.c" \
		"$b/core/librelay_core.a" "$b/support/librelay_support.a" \
		$(pkg-config --libs json-c libcrypto libarchive libcurl libpng zlib) -lpthread -ldl -lm -o "$WORK/hash_bench.$side"
	# The preview module is core/src/image before issue 26, core/src/pixels after; each tree's
	# own preview_bench.c names its own.
	pix=$t/core/src/pixels
	[ -d "$pix" ] || pix=$t/core/src/image
	# shellcheck disable=SC2046
	cc -std=c11 -D_GNU_SOURCE -O2 -g -DNDEBUG -I"$t/core/include" -I"$t/core/src" -I"$t/support/include" -I"$t/support/json" \
		$(pkg-config --cflags json-c libpng) -o "$WORK/preview_bench.$side" "$t/bench/image/preview_bench.c" \
		"$pix"/*.c "$t/core/src/util/error.c" "$t/core/src/util/sha256.c" \
		"$t/core/src/util/jsonx.c" "$t/core/src/util/strbuf.c" "$b/support/librelay_support.a" \
		$(pkg-config --libs json-c libpng zlib libcrypto) -lpthread -lm
done

N=$((200 + $$ % 300))
while [ -e /tmp/.X$N-lock ] || [ -e /tmp/.X11-unix/X$N ]; do N=$((N + 1)); done
XVFB_PID= XWUD_PID=
cleanup() {
	[ -n "$XWUD_PID" ] && kill "$XWUD_PID" 2>/dev/null || true
	[ -n "$XVFB_PID" ] && kill "$XVFB_PID" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
Xvfb :$N -screen 0 1280x800x24 -nolisten tcp -noreset >"$WORK/xvfb.log" 2>&1 &
XVFB_PID=$!
i=0
while [ ! -e /tmp/.X11-unix/X$N ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
DISPLAY=:$N xwud -in "$WORK/scene.xwd" -geometry +0+0 >/dev/null 2>&1 &
XWUD_PID=$!
sleep 1

ir() { # NAME SIDE command...: callgrind's total instructions of the command
	local name=$1 side=$2
	shift 2
	local out=$WORK/$name.$side.cg
	valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$out" "$@" \
		>"$WORK/$name.$side.stdout" 2>"$WORK/$name.$side.log" <"${STDIN:-/dev/null}"
	awk '/^(summary|totals):/ {print $2; exit}' "$out"
}
PLATFORM=linux-$(uname -m)
echo "| what | before Ir | after Ir | after / before | load |"
echo "|---|---:|---:|---:|---|"
for what in status manifest preview shot shot-getimage; do
	declare -A count=()
	for side in before after; do
		t=$BEFORE_TREE
		[ $side = after ] && t=$AFTER_TREE
		b=$t/build-bench
		shot=$b/libexec/mcp-relay/receivers/$PLATFORM/relay-x11shot
		state=$WORK/state.$side
		rm -rf "$state" "$WORK/project.$side" && mkdir -m 700 "$state" "$WORK/project.$side"
		case $what in
		status) count[$side]=$(MCP_RELAY_STATE_DIR=$state MCP_RELAY_PROJECT=$WORK/project.$side \
			STDIN=$WORK/status2000.jsonl ir "$what" $side "$b/mcp-relay") ;;
		manifest) count[$side]=$(ir "$what" $side "$WORK/hash_bench.$side" "$WORK/tree" 1) ;;
		preview) count[$side]=$(ir "$what" $side "$WORK/preview_bench.$side" "$WORK/in.png" "$WORK/out.$side.png") ;;
		shot) count[$side]=$(ir "$what" $side "$shot" --display :$N --out "$WORK/shot.$side.png") ;;
		shot-getimage) count[$side]=$(RELAY_X11SHOT_NO_SHM=1 ir "$what" $side "$shot" --display :$N \
			--out "$WORK/shotg.$side.png") ;;
		esac
	done
	awk -v w="$what" -v a="${count[before]}" -v b="${count[after]}" -v l="$(cut -d' ' -f1-3 /proc/loadavg)" \
		'BEGIN { printf "| %s | %.1f M | %.1f M | %.3f | %s |\n", w, a / 1e6, b / 1e6, b / a, l }'
	callgrind_annotate "$WORK/$what.before.cg" >"$WORK/$what.before.txt" 2>/dev/null || true
	callgrind_annotate "$WORK/$what.after.cg" >"$WORK/$what.after.txt" 2>/dev/null || true
	unset count
done
[ "$(grep -c '"id":' "$WORK/status.after.stdout")" = 2001 ] || echo "warning: status: not 2,001 answers" >&2
cmp -s "$WORK/out.before.png" "$WORK/out.after.png" || echo "note: the preview PNGs differ" >&2
echo "per-function profiles: $WORK/*.{before,after}.txt (callgrind_annotate)"
