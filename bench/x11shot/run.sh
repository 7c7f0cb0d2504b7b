#!/bin/sh
# bench/x11shot/run.sh — relay-x11shot against ImageMagick's `import -window root`
# on Xvfb at 1280x800 and 1920x1080, in one run, alternating, medians.
#
# Usage: bench/x11shot/run.sh [build-dir] [runs]
#   build-dir  where relay-x11shot was built (default: build); make all builds it
#   runs       timed captures per program and size (default 21)
# Needs: Xvfb, xwud (x11-apps), ImageMagick (convert, import, compare).
#
# The screen shows a desktop-like picture (gradient wallpaper, two windows of
# antialiased text, a photo-like patch, a task bar), drawn with ImageMagick
# and shown by xwud at +0+0. Each timing is one whole process run, start to
# exit, as the guest receiver would run it; both programs write a new file.
set -eu

BUILD=${1:-build}
RUNS=${2:-21}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PLATFORM=linux-$(uname -m)
SHOT=$BUILD/libexec/mcp-relay/receivers/$PLATFORM/relay-x11shot

for tool in Xvfb xwud convert import compare; do
	command -v $tool >/dev/null 2>&1 || { echo "missing $tool (Debian: xvfb x11-apps imagemagick)" >&2; exit 1; }
done
[ -x "$SHOT" ] || { echo "missing $SHOT: build it with make -C $BUILD relay-x11shot" >&2; exit 1; }

WORK=$(mktemp -d /tmp/relay-bench-x11shot-XXXXXX)
XVFB_PID=
XWUD_PID=
cleanup() {
	[ -n "$XWUD_PID" ] && kill "$XWUD_PID" 2>/dev/null || true
	[ -n "$XVFB_PID" ] && kill "$XVFB_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

scene() { # W H OUT
	W=$1 H=$2
	T1=$(sed -n '1,60p' "$ROOT/guest/relay-x11shot.c")
	T2=$(sed -n '300,340p' "$ROOT/guest/relay-x11shot.c")
	convert -size "${W}x${H}" gradient:'#2b5876-#4e4376' \
		\( -size $((W * 55 / 100))x$((H * 65 / 100)) xc:'#f5f5f5' -font DejaVu-Sans-Mono -pointsize 13 \
			-fill '#202020' -annotate +10+20 "$T1" \) -geometry +$((W / 24))+$((H / 18)) -composite \
		\( -size $((W * 30 / 100))x$((H * 45 / 100)) xc:white -font DejaVu-Sans -pointsize 15 \
			-fill '#333333' -annotate +15+30 "$T2" \) -geometry +$((W * 64 / 100))+$((H / 6)) -composite \
		\( -size $((W / 5))x$((H / 4)) -seed 7 plasma:fractal -blur 0x1 \) \
			-geometry +$((W * 68 / 100))+$((H * 68 / 100)) -composite \
		\( -size "${W}x40" xc:'#303030' \) -geometry +0+$((H - 40)) -composite -depth 8 "$3"
}

free_display() {
	n=$((200 + $$ % 300))
	while [ -e /tmp/.X$n-lock ] || [ -e /tmp/.X11-unix/X$n ]; do n=$((n + 1)); done
	echo $n
}

echo "relay-x11shot vs ImageMagick import, $RUNS runs each, alternating ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
echo "host: $(nproc) cores, $(uname -sr); $(import -version | head -1)"
echo
echo "| screen | relay-x11shot median | same, GetImage (no MIT-SHM) | import median | import / relay-x11shot | PNG bytes (ours / import) |"
echo "|---|---|---|---|---|---|"
for size in 1280x800 1920x1080; do
	W=${size%x*} H=${size#*x}
	scene "$W" "$H" "$WORK/scene.png"
	convert "$WORK/scene.png" "$WORK/scene.xwd"
	N=$(free_display)
	Xvfb :$N -screen 0 "${size}x24" -nolisten tcp -noreset >"$WORK/xvfb.log" 2>&1 &
	XVFB_PID=$!
	i=0
	while [ ! -e /tmp/.X11-unix/X$N ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	DISPLAY=:$N xwud -in "$WORK/scene.xwd" -geometry +0+0 >/dev/null 2>&1 &
	XWUD_PID=$!
	sleep 1
	# Sanity: both read the same pixels, equal to the picture.
	rm -f "$WORK/check.png"
	"$SHOT" --display :$N --out "$WORK/check.png" >/dev/null
	diff=$(compare -metric AE "$WORK/check.png" "$WORK/scene.png" null: 2>&1 || true)
	[ "$diff" = 0 ] || echo "warning: capture differs from the picture in $diff pixels" >&2
	: >"$WORK/ours.txt"
	: >"$WORK/noshm.txt"
	: >"$WORK/im.txt"
	r=0
	while [ $r -lt "$RUNS" ]; do
		rm -f "$WORK/ours.png" "$WORK/im.png"
		t0=$(now_ns)
		"$SHOT" --display :$N --out "$WORK/ours.png" >/dev/null
		t1=$(now_ns)
		import -display :$N -window root "$WORK/im.png"
		t2=$(now_ns)
		rm -f "$WORK/noshm.png"
		RELAY_X11SHOT_NO_SHM=1 "$SHOT" --display :$N --out "$WORK/noshm.png" >/dev/null
		t3=$(now_ns)
		echo $(((t1 - t0) / 1000)) >>"$WORK/ours.txt"
		echo $(((t2 - t1) / 1000)) >>"$WORK/im.txt"
		echo $(((t3 - t2) / 1000)) >>"$WORK/noshm.txt"
		r=$((r + 1))
	done
	diff=$(compare -metric AE "$WORK/ours.png" "$WORK/im.png" null: 2>&1 || true)
	[ "$diff" = 0 ] || echo "warning: relay-x11shot and import differ in $diff pixels" >&2
	cmp -s "$WORK/ours.png" "$WORK/noshm.png" || echo "warning: the MIT-SHM and GetImage captures differ" >&2
	ours=$(median <"$WORK/ours.txt")
	noshm=$(median <"$WORK/noshm.txt")
	im=$(median <"$WORK/im.txt")
	awk -v s="$size" -v o="$ours" -v n="$noshm" -v i="$im" -v ob="$(stat -c %s "$WORK/ours.png")" \
		-v ib="$(stat -c %s "$WORK/im.png")" \
		'BEGIN { printf "| %s | %.1f ms | %.1f ms | %.1f ms | %.2fx | %d / %d |\n", s, o / 1000, n / 1000, i / 1000, i / o, ob, ib }'
	kill "$XWUD_PID" "$XVFB_PID" 2>/dev/null || true
	wait "$XWUD_PID" "$XVFB_PID" 2>/dev/null || true
	XWUD_PID=
	XVFB_PID=
done
