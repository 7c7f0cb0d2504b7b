#!/bin/sh
# bench/transfer-ssh/run.sh — transfer-ssh against plain OpenSSH (README.md).
#
#   bench/transfer-ssh/run.sh BUILD_DIR
#
# BUILD_DIR is a build WITHOUT sanitizers in which relay_core and
# transfer-ssh are built (the driver links BUILD_DIR/core/librelay_core.a and
# loads BUILD_DIR/lib/mcp-relay/plugins/transfer-ssh.so). Runs as root: it
# starts its own sshd on 127.0.0.1 with throwaway keys, like the unit tests.
#
# Environment: RUNS (tree pushes per variant, default 3), EXECS (execs per
# variant, 50), FILES (10000), BYTES (536870912), SCP_RUNS (1). Every timed
# transfer starts after `sync`, so no run pays for the previous one's writeback.
set -eu

BUILD=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-5}
EXECS=${EXECS:-50}
FILES=${FILES:-10000}
BYTES=${BYTES:-536870912}
SCP_RUNS=${SCP_RUNS:-1}

[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (sshd with key login as root)" >&2; exit 2; }
[ -f "$BUILD/core/librelay_core.a" ] || { echo "run.sh: build relay_core in $BUILD first" >&2; exit 2; }
[ -f "$BUILD/lib/mcp-relay/plugins/transfer-ssh.so" ] || { echo "run.sh: build transfer-ssh in $BUILD first" >&2; exit 2; }
if grep -q '^RELAY_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
	echo "run.sh: $BUILD is a sanitizer build; use a RelWithDebInfo build" >&2
	exit 2
fi

W=$(mktemp -d /var/tmp/relay-bench-ssh-XXXXXX)
SSHD_PID=
cleanup() {
	[ -n "${SSH_OPTS:-}" ] && ssh $SSH_OPTS -O exit root@127.0.0.1 >/dev/null 2>&1 || true
	[ -n "$SSHD_PID" ] && kill "$SSHD_PID" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT INT TERM

echo "building the driver" >&2
cc -O2 -std=c11 -D_GNU_SOURCE -I"$SRC/core/include" -I"$SRC/core/src" "$SRC/bench/transfer-ssh/bench_transfer_ssh.c" \
	"$BUILD/core/librelay_core.a" "$BUILD/support/librelay_support.a" $(pkg-config --libs json-c libcurl libarchive libpng zlib libcrypto) -lpthread -ldl -lm \
	-o "$W/driver"
DRIVER=$W/driver
export MCP_RELAY_PLUGIN_PATH=$BUILD/lib/mcp-relay/plugins

echo "starting sshd" >&2
mkdir -p -m 0755 /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$W/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$W/user_key"
cp "$W/user_key.pub" "$W/authorized_keys"
PORT=$("$DRIVER" port)
cat >"$W/sshd_config" <<CFG
Port $PORT
ListenAddress 127.0.0.1
HostKey $W/host_key
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile $W/authorized_keys
StrictModes no
PidFile $W/sshd.pid
MaxSessions 64
MaxStartups 64
Subsystem sftp internal-sftp
CFG
/usr/sbin/sshd -D -e -f "$W/sshd_config" 2>"$W/sshd.log" &
SSHD_PID=$!
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$W/host_key.pub")" >"$W/known_hosts"
i=0
until ssh-keyscan -p "$PORT" 127.0.0.1 >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 50 ] || { cat "$W/sshd.log" >&2; exit 1; }
	sleep 0.1
done
cat >"$W/lease.json" <<LEASE
{"vm":"bench","purpose":"relay-bench-0","image":"localhost","state":"running",
 "ssh":{"host":"127.0.0.1","port":$PORT,"user":"root","identityFile":"$W/user_key","knownHostsFile":"$W/known_hosts"},
 "record":{}}
LEASE
# The raw side gets the same client settings and its own multiplexing master.
SSH_OPTS="-F /dev/null -T -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$W/known_hosts \
-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o IdentityAgent=none -i $W/user_key \
-o ControlPath=$W/raw-cm -o ControlMaster=auto -o ControlPersist=300 -o LogLevel=ERROR -p $PORT"
SCP_OPTS="-F /dev/null -q -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$W/known_hosts \
-o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o IdentityAgent=none -i $W/user_key \
-o ControlPath=$W/raw-cm -o ControlMaster=auto -o ControlPersist=300 -o LogLevel=ERROR -P $PORT"
ssh $SSH_OPTS -M -N -f root@127.0.0.1

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "writing $FILES files, $BYTES bytes" >&2
"$DRIVER" gen "$W/src" "$FILES" "$BYTES"
sync
cat "$W"/src/*/* >/dev/null # the same warm page cache for every variant
GOT_BYTES=$(find "$W/src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
check_copy() { # $1 folder: same number of files and bytes as the source
	n=$(find "$1" -type f | wc -l)
	b=$(find "$1" -type f -exec cat {} + | wc -c)
	[ "$n" = "$FILES" ] && [ "$b" = "$BYTES" ] || { echo "run.sh: $1 holds $n files, $b bytes" >&2; exit 1; }
}

: >"$W/plugin.txt"
: >"$W/raw.txt"
: >"$W/scp.txt"
r=0
while [ $r -lt "$RUNS" ]; do
	r=$((r + 1))
	echo "tree push $r/$RUNS: transfer-ssh" >&2
	rm -rf "$W/dst-plugin" && sync
	"$DRIVER" push "$W/lease.json" "$W/src" "$W/dst-plugin" | awk '/^push_ms/ {print $2}' >>"$W/plugin.txt"
	check_copy "$W/dst-plugin"
	echo "tree push $r/$RUNS: tar c | ssh tar x" >&2
	rm -rf "$W/dst-raw" && mkdir "$W/dst-raw" && sync
	"$DRIVER" time 1 sh -c "tar -c -f - -C '$W/src' . | ssh $SSH_OPTS root@127.0.0.1 'tar -x -f - -C $W/dst-raw'" |
		awk '{print $2}' >>"$W/raw.txt"
	check_copy "$W/dst-raw"
done
rm -rf "$W/dst-plugin" "$W/dst-raw"

r=0
while [ $r -lt "$SCP_RUNS" ]; do
	r=$((r + 1))
	echo "tree push $r/$SCP_RUNS: one scp per file ($FILES files)" >&2
	rm -rf "$W/dst-scp"
	(cd "$W/src" && find . -type d) | sed "s|^\.|$W/dst-scp|" | xargs mkdir -p # folders made beforehand, untimed
	(cd "$W/src" && find . -type f | sed 's|^\./||') >"$W/files.txt"
	sync
	cat >"$W/scp-all.sh" <<SCP
#!/bin/sh
while read -r f; do scp $SCP_OPTS "$W/src/\$f" "root@127.0.0.1:$W/dst-scp/\$f" || exit 1; done <"$W/files.txt"
SCP
	"$DRIVER" time 1 sh "$W/scp-all.sh" | awk '{print $2}' >>"$W/scp.txt"
	check_copy "$W/dst-scp"
	rm -rf "$W/dst-scp"
done

echo "exec of true, $EXECS times each, interleaved in rounds of 5" >&2
: >"$W/exec-plugin.txt"
: >"$W/exec-raw.txt"
: >"$W/exec-raw-sh.txt"
r=0
while [ $r -lt "$EXECS" ]; do
	r=$((r + 5))
	"$DRIVER" exec "$W/lease.json" 5 | awk '{print $2}' >>"$W/exec-plugin.txt"
	"$DRIVER" time 5 ssh $SSH_OPTS root@127.0.0.1 true | awk '{print $2}' >>"$W/exec-raw.txt"
	"$DRIVER" time 5 ssh $SSH_OPTS root@127.0.0.1 'exec /bin/sh -c true' | awk '{print $2}' >>"$W/exec-raw-sh.txt"
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
P=$(median <"$W/plugin.txt")
PMIN=$(sort -n "$W/plugin.txt" | head -n 1)
RMIN=$(sort -n "$W/raw.txt" | head -n 1)
# Each plugin push ran right before a raw one: their ratio cancels slow drifts
# in the machine's load.
PAIRED=$(paste "$W/plugin.txt" "$W/raw.txt" | awk '{printf "%.3f\n", $1 / $2}' | median)
R=$(median <"$W/raw.txt")
S=$(median <"$W/scp.txt")
EP=$(median <"$W/exec-plugin.txt")
ER=$(median <"$W/exec-raw.txt")
ES=$(median <"$W/exec-raw-sh.txt")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

cat <<RESULT
## Results ($(date -u +%Y-%m-%dT%H:%MZ), $(uname -sm), $(nproc) cores, $(ssh -V 2>&1 | cut -d, -f1))

Load average before: $LOAD_BEFORE; after: $LOAD_AFTER (1, 5, 15 min).

(a) staging $FILES files, $GOT_BYTES bytes, into a new guest folder

| variant | runs | median ms | ratio to raw tar |
|---|---|---|---|
| transfer-ssh tree push (tar stream + sha256 both sides + commit) | $RUNS | $P | $(ratio "$P" "$R") |
| \`tar c \| ssh host tar x\` (multiplexed) | $RUNS | $R | 1.00 |
| one \`scp\` per file (multiplexed) | $SCP_RUNS | $S | $(ratio "$S" "$R") |

Fastest runs: transfer-ssh $PMIN ms, raw tar $RMIN ms ($(ratio "$PMIN" "$RMIN")x). Median of the paired ratios
(each plugin push against the raw push that followed it): ${PAIRED}x.

transfer-ssh is $(ratio "$S" "$P")x faster than one scp per file (target: at least 5x) and takes $(ratio "$P" "$R")x
the raw tar pipe by medians (target: at most 1.25x).

(b) exec of \`true\`, $EXECS sequential calls each, interleaved in rounds of 5

| variant | median ms | ratio |
|---|---|---|
| transfer-ssh exec | $EP | $(ratio "$EP" "$ER") |
| \`ssh host true\` (multiplexed) | $ER | 1.00 |
| \`ssh host 'exec /bin/sh -c true'\` (multiplexed) | $ES | $(ratio "$ES" "$ER") |

Raw samples (ms): plugin push: $(tr '\n' ' ' <"$W/plugin.txt"); raw: $(tr '\n' ' ' <"$W/raw.txt"); scp: $(tr '\n' ' ' <"$W/scp.txt")
RESULT
