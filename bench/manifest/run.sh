#!/usr/bin/env bash
# bench/manifest/run.sh — manifest hashing against sha256sum over 1 GiB in
# 2,000 files. Builds relay_core (RelWithDebInfo, -O2, no tests) in $BUILD, links the
# small driver hash_bench.c against it, makes the data once in $DATA, then
# alternates our hashing and `sha256sum` over the same files ($ROUNDS rounds,
# warm page cache) and prints the medians and the throughput ratio.
#
#   bench/manifest/run.sh            (BUILD, DATA, ROUNDS, THREADS may be set)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-$REPO/build-bench}
DATA=${DATA:-/tmp/mcp-relay-manifest-bench}
ROUNDS=${ROUNDS:-7}
THREADS=${THREADS:-2}
FILES=2000
TOTAL=$((1 << 30))

cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRELAY_BUILD_TESTS=OFF >/dev/null
make -C "$BUILD" relay_core -j2 >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I"$REPO/core/src" -I"$REPO/core/include" "$HERE/hash_bench.c" \
	"$BUILD/core/librelay_core.a" "$BUILD/support/librelay_support.a" $(pkg-config --libs json-c libcrypto libarchive libcurl libpng zlib) \
	-lpthread -ldl -lm -o "$BUILD/hash_bench"

if [ "$(find "$DATA" -type f 2>/dev/null | wc -l)" != "$FILES" ]; then
	rm -rf "$DATA" && mkdir -p "$DATA/a" "$DATA/b"
	# 1 GiB of random bytes (incompressible, like PNGs) cut into 2,000 files in two folders.
	head -c "$TOTAL" /dev/urandom | split -b $(((TOTAL + FILES - 1) / FILES)) -d -a 4 - "$DATA/a/f"
	for f in $(ls "$DATA/a" | tail -n 1000); do mv "$DATA/a/$f" "$DATA/b/$f"; done
fi
echo "data: $(find "$DATA" -type f | wc -l) files, $(du -sb "$DATA" | cut -f1) bytes in $DATA"
cat "$DATA"/a/* "$DATA"/b/* >/dev/null # warm the page cache for both contenders

secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
ours=() theirs=() one=()
for i in $(seq 1 "$ROUNDS"); do
	ours+=("$(secs "$BUILD/hash_bench" "$DATA" "$THREADS")")
	theirs+=("$(secs sh -c "find '$DATA' -type f -print0 | xargs -0 sha256sum")")
	one+=("$(secs "$BUILD/hash_bench" "$DATA" 1)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}") m1=$(median "${one[@]}")
echo "rounds: $ROUNDS (alternating)"
echo "ours ($THREADS threads): ${ours[*]}"
echo "ours (1 thread):   ${one[*]}"
echo "sha256sum:         ${theirs[*]}"
printf 'median seconds: ours %.3f, ours 1 thread %.3f, sha256sum %.3f\n' "$mo" "$m1" "$mt"
printf 'throughput ratio (sha256sum time / ours): %.2fx (%d threads), %.2fx (1 thread)\n' \
	"$(echo "$mt / $mo" | bc -l)" "$THREADS" "$(echo "$mt / $m1" | bc -l)"
