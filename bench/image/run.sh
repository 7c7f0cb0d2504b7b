#!/bin/sh
# bench/image/run.sh — the relay's PNG preview (core/src/pixels) against
# ImageMagick's `convert in.png -resize 2000x2000 out.png`, on a 5120x2880
# screenshot-like PNG, in one run, alternating, medians and their ratio.
#
# Usage: bench/image/run.sh [runs]      (default 11 runs of each)
# Needs: a C compiler, pkg-config, libpng, json-c and libcrypto development
# files (the project's build dependencies) and ImageMagick.
#
# The driver (bench/image/preview_bench.c) is compiled here from the image
# module's sources with -O2, so the numbers never depend on how a build
# folder was configured (a sanitizer build would be several times slower).
# Each timing is one whole process: read the file, validate, decode,
# resample, encode (and, for ours, SHA-256, base64 and the receipt), write.
# ImageMagick is run through its real binary (convert-im6.q16 or magick when
# present), not a wrapper script that may sit first on PATH.
set -eu

RUNS=${1:-11}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CC=${CC:-cc}

if [ -n "${IM_CONVERT:-}" ]; then
	IM=$IM_CONVERT
elif command -v convert-im6.q16 >/dev/null 2>&1; then
	IM=$(command -v convert-im6.q16)
elif command -v magick >/dev/null 2>&1; then
	IM=$(command -v magick)
else
	IM=$(command -v convert) || { echo "ImageMagick is not installed (Debian: imagemagick)" >&2; exit 1; }
fi

WORK=$(mktemp -d /tmp/relay-bench-image-XXXXXX)
trap 'rm -rf "$WORK"' EXIT INT TERM

# shellcheck disable=SC2046
"$CC" -std=c11 -D_GNU_SOURCE -O2 -DNDEBUG -I"$ROOT/core/include" -I"$ROOT/core/src" \
	-I"$ROOT/support/include" -I"$ROOT/support/json" $(pkg-config --cflags json-c libpng zlib) -o "$WORK/preview_bench" "$HERE/preview_bench.c" \
	"$ROOT"/core/src/pixels/*.c "$ROOT/core/src/util/error.c" "$ROOT/core/src/util/sha256.c" \
	"$ROOT/core/src/util/jsonx.c" "$ROOT/core/src/util/strbuf.c" "$ROOT/support/src/utf8.c" \
	"$ROOT/support/src/adler32.c" $(pkg-config --libs json-c libpng zlib libcrypto) -lpthread -lm

# A 5120x2880 screenshot-like picture: gradient wallpaper, two windows of
# antialiased text, a photo-like patch, a task bar.
W=5120
H=2880
T1=$(sed -n '1,80p' "$ROOT/guest/relay-x11shot.c")
T2=$(sed -n '300,360p' "$ROOT/guest/relay-x11shot.c")
"$IM" -size "${W}x${H}" gradient:'#2b5876-#4e4376' \
	\( -size $((W * 55 / 100))x$((H * 65 / 100)) xc:'#f5f5f5' -font DejaVu-Sans-Mono -pointsize 34 \
		-fill '#202020' -annotate +20+50 "$T1" \) -geometry +$((W / 24))+$((H / 18)) -composite \
	\( -size $((W * 30 / 100))x$((H * 45 / 100)) xc:white -font DejaVu-Sans -pointsize 40 \
		-fill '#333333' -annotate +40+80 "$T2" \) -geometry +$((W * 64 / 100))+$((H / 6)) -composite \
	\( -size $((W / 5))x$((H / 4)) -seed 7 plasma:fractal -blur 0x1 \) \
		-geometry +$((W * 68 / 100))+$((H * 68 / 100)) -composite \
	\( -size "${W}x100" xc:'#303030' \) -geometry +0+$((H - 100)) -composite -depth 8 "$WORK/in.png"

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$WORK/ours.txt"
: >"$WORK/im.txt"
r=0
while [ "$r" -lt "$RUNS" ]; do
	rm -f "$WORK/ours.png" "$WORK/im.png"
	t0=$(now_ns)
	"$WORK/preview_bench" "$WORK/in.png" "$WORK/ours.png" >"$WORK/ours.out"
	t1=$(now_ns)
	"$IM" "$WORK/in.png" -resize 2000x2000 "$WORK/im.png"
	t2=$(now_ns)
	echo $(((t1 - t0) / 1000)) >>"$WORK/ours.txt"
	echo $(((t2 - t1) / 1000)) >>"$WORK/im.txt"
	r=$((r + 1))
done

ours=$(median <"$WORK/ours.txt")
im=$(median <"$WORK/im.txt")
echo "PNG preview of a ${W}x${H} screenshot ($(stat -c %s "$WORK/in.png") bytes), $RUNS runs each, alternating" \
	"($(date -u +%Y-%m-%dT%H:%M:%SZ))"
echo "host: $(nproc) cores, $(uname -sr); ImageMagick: $("$IM" -version | head -1) ($IM)"
echo
echo "| program | median | output |"
echo "|---|---|---|"
awk -v t="$ours" -v d="$(cut -d' ' -f1 "$WORK/ours.out")" -v b="$(stat -c %s "$WORK/ours.png")" \
	'BEGIN { printf "| relay image_present (area average, zlib 6) | %.1f ms | %s, %d bytes |\n", t / 1000, d, b }'
awk -v t="$im" -v b="$(stat -c %s "$WORK/im.png")" -v d="$("$IM" identify -format '%wx%h' "$WORK/im.png" 2>/dev/null ||
	identify -format '%wx%h' "$WORK/im.png")" \
	'BEGIN { printf "| convert -resize 2000x2000 | %.1f ms | %s, %d bytes |\n", t / 1000, d, b }'
awk -v o="$ours" -v i="$im" 'BEGIN { printf "\nratio ours / ImageMagick: %.2fx (target: at most 1.00x)\n", o / i }'
