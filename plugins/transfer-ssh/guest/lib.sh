# transfer-ssh guest library: failure lines, process groups, the sweep (docs/transfer-ssh.md).
relay_fail() {
	printf 'relay-ssh: %s\n' "$2" >&2
	exit "$1"
}
relay_pg() {
	rg=
	{ read -r rs < "/proc/$1/stat"; } 2>/dev/null || return 1
	rs=${rs##*") "}
	set -f
	set -- $rs
	set +f
	case $1 in Z | X | x) return 1 ;; esac
	rg=$3
}
relay_psline() {
	[ "$3" = "$1" ] || return 0
	[ "$2" = "$$" ] && return 0
	case $4 in Z*) return 0 ;; esac
	case $(kill -s KILL "$2" 2>&1) in '') rl=1 ;; *ermi*) rl=1 ;; esac
	return 0
}
relay_sweep() {
	ri=0
	while :; do
		rl=0
		if [ -r /proc/self/stat ] && command -v awk >/dev/null 2>&1; then
			rx=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$1" -v me=$$ '{ p = $1; s = $0; sub(/.*\) /, "", s); split(s, f, " "); if (f[3] == g && p != me && f[1] != "Z" && f[1] != "X") print p }') || return 2
			for rp in $rx; do
				if kill -s KILL "$rp" 2>/dev/null; then rl=1
				elif relay_pg "$rp" && [ "$rg" = "$1" ]; then rl=1; fi
			done
		elif [ -r /proc/self/stat ]; then
			for rd in /proc/[0-9]*; do
				rp=${rd#/proc/}
				[ "$rp" = "$$" ] && continue
				relay_pg "$rp" || continue
				[ "$rg" = "$1" ] || continue
				rl=1
				kill -s KILL "$rp" 2>/dev/null
			done
		elif command -v ps >/dev/null 2>&1; then
			rx=$(ps -A -o pid= -o pgid= -o stat= 2>/dev/null) || return 2
			ro=$IFS
			IFS='
'
			set -f
			for rline in $rx; do
				IFS=$ro
				relay_psline "$1" $rline
			done
			IFS=$ro
			set +f
		else
			return 2
		fi
		[ "$rl" = 0 ] && return 0
		ri=$((ri + 1))
		[ "$ri" -ge 50 ] && return 1
		sleep 0.1 2>/dev/null || sleep 1
	done
}
