# transfer-ssh push (ssh_push.h). Op args: <token> <guest path> file|tree
# overlap|after|unchecked. Needs lib.sh, facts.sh. "unchecked": the caller checks
# the copy itself (RELAY_XFER_CALLER_VERIFIES), nothing is hashed here.
relay_merge() {
	# Entries that meet something in the destination, one at a time: a
	# link there is removed, folders are merged (in a subshell, which keeps
	# this call's variables), a file replaces a file.
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		n=${e##*/}
		if [ -L "$2/$n" ]; then rm -f -- "$2/$n" || return 1; fi
		if [ -d "$e" ] && [ -d "$2/$n" ]; then
			(relay_merge "$e" "$2/$n") || return 1
			rm -rf -- "$e" || return 1
		elif [ -d "$2/$n" ]; then
			printf 'relay-ssh: %s\n' "the pushed file $n would replace the guest folder $2/$n" >&2
			return 1
		elif [ -e "$2/$n" ]; then
			mv -f -- "$e" "$2/$n" || return 1
		fi
	done
	# The rest meet nothing: moved a batch at a time, not one mv each.
	mg_src=$1 mg_dst=$2
	set --
	for e in "$mg_src"/* "$mg_src"/.[!.]* "$mg_src"/..?*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		set -- "$@" "$e"
		if [ $# -ge 256 ]; then
			mv -f -- "$@" "$mg_dst/" || return 1
			set --
		fi
	done
	[ $# -eq 0 ] || mv -f -- "$@" "$mg_dst/" || return 1
	return 0
}
relay_nap() {
	sleep 0.05 2>/dev/null || sleep 1
}
relay_feed() {
	# In the copy's folder: prints, NUL-terminated, each file of the order
	# list once tar has finished it (the next one exists, or tar ended).
	# Run after tar has ended ($2 exists), it never waits.
	rfo=./.relay-order-$1 rfl=$2
	while [ ! -e "$rfo.done" ]; do
		[ -e "$rfl" ] && return 0
		relay_nap
	done
	ro=$IFS
	IFS='
'
	set -f
	set -- $(cat "$rfo")
	set +f
	IFS=$ro
	rprev=
	for rf in "$@"; do
		while [ ! -e "$rf" ] && [ ! -e "$rfl" ]; do relay_nap; done
		[ -z "$rprev" ] || printf '%s\0' "$rprev"
		rprev=$rf
	done
	while [ ! -e "$rfl" ]; do relay_nap; done
	[ -z "$rprev" ] || printf '%s\0' "$rprev"
}
relay_drop() {
	cd /
	[ -z "${rb:-}" ] || wait "$rb" 2>/dev/null
	rm -rf -- "$x" "$hf" "$sf" "$fl"
	relay_fail "$1" "$2"
}
# A single file: the copy holds f and the three list members, nothing else.
# Hash and size are taken after tar ended, straight into the facts block.
relay_push_file() {
	for e in ./* ./.[!.]* ./..?*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		case $e in
		./f | "./.relay-order-$t" | "./.relay-order-$t.done" | "./.relay-expected-$t")
			[ -f "$e" ] && [ ! -L "$e" ] ||
				relay_drop 4 "the stream unpacked to something other than files and folders" ;;
		*) relay_drop 6 "the files written in the guest differ from the ones sent; nothing was replaced" ;;
		esac
	done
	[ -f ./f ] && [ -f "./.relay-expected-$t" ] || relay_drop 5 "the stream ended before its list of hashes"
	if [ "$m" = unchecked ]; then
		printf '\036relay-nohash\n'
	else
		relay_check_file
	fi
	cd /
	if [ -L "$d" ]; then relay_drop 4 "guest path $d became a symbolic link; nothing was replaced"; fi
	if [ -d "$d" ]; then relay_drop 4 "guest path $d became a folder; nothing was replaced"; fi
	mv -f -- "$x/f" "$d" || relay_drop 5 "cannot move the pushed file into place at $d"
	rm -rf -- "$x"
	printf '\036relay-committed\n'
	exit 0
}
# The single file ./f against the one-line list: "<sha256> ./f".
relay_check_file() {
	n=0
	while IFS= read -r l || [ -n "$l" ]; do
		n=$((n + 1))
		e=$l
	done <"./.relay-expected-$t"
	[ "$n" = 1 ] && [ "$e" = "${e%% *} ./f" ] || relay_drop 6 "the files written in the guest differ from the ones sent; nothing was replaced"
	if relay_hashtool small; then
		h=$($rh ./f) || relay_drop 5 "cannot hash the file unpacked into $x"
		s=$(wc -c ./f) || relay_drop 5 "cannot measure the file unpacked into $x"
		printf '\036relay-hashes\n%s\n\036relay-sizes\n%s\n\036relay-done\n' "$h" "$s"
		case $h in
		"${e%% *}  ./f" | "${e%% *} *./f") ;;
		*) relay_drop 6 "the files written in the guest differ from the ones sent; nothing was replaced" ;;
		esac
	else
		printf '\036relay-nohash\n'
	fi
}
relay_op_push() {
	umask 077
	t=$1 d=$2 k=$3 m=${4:-}
	if [ -L "$d" ]; then relay_fail 4 "guest path $d is a symbolic link; the transport never writes through one"; fi
	if [ "$k" = file ]; then
		if [ -d "$d" ]; then relay_fail 4 "guest path $d is a folder, so a file cannot replace it"; fi
	elif [ -e "$d" ] && [ ! -d "$d" ]; then
		relay_fail 4 "guest path $d exists and is not a folder"
	fi
	p=${d%/*}
	[ -n "$p" ] || p=/
	[ -d "$p" ] || mkdir -p -- "$p" 2>/dev/null
	[ -d "$p" ] || relay_fail 5 "cannot create the guest folder $p"
	x=$p/.relay-push-$t hf=$p/.relay-push-$t.hashes sf=$p/.relay-push-$t.sizes fl=$p/.relay-push-$t.untarred rb= rh=
	mkdir -- "$x" 2>/dev/null || relay_fail 5 "cannot create the guest folder $x"
	# With "overlap" (large trees), hash and measure each file as soon as
	# tar has finished it, while tar unpacks the next ones (hashes to $hf,
	# sizes to $sf, taken together); otherwise after tar ended.
	if [ "$k" != file ] && [ "$m" = overlap ] && relay_hashtool; then
		(cd -- "$x" && relay_feed "$t" "$fl" |
			xargs -0 -n 256 sh -c "$rh \"\$@\" >&3 && wc -c \"\$@\"" relay-hash >"$sf" 3>"$hf") &
		rb=$!
	fi
	tar -x -o -f - -C "$x"
	rt=$?
	rbs=0
	if [ -n "$rb" ]; then
		: >"$fl"
		wait "$rb" || rbs=$?
		rb=
	fi
	[ "$rt" = 0 ] || relay_drop 5 "the guest tar could not unpack the stream into $x"
	cd -- "$x" || relay_drop 5 "cannot enter the guest folder $x"
	[ "$k" != file ] || relay_push_file
	if [ -z "$rh" ] && [ "$m" != unchecked ] && relay_hashtool small; then
		: >"$fl"
		relay_feed "$t" "$fl" | xargs -0 -n 256 sh -c "$rh \"\$@\" >&3 && wc -c \"\$@\"" relay-hash >"$sf" 3>"$hf" ||
			rbs=$?
	fi
	b=$(find . ! -type f ! -type d -print) || relay_drop 5 "cannot list $x"
	[ -z "$b" ] || relay_drop 4 "the stream unpacked to something other than files and folders"
	[ -f "./.relay-expected-$t" ] || relay_drop 5 "the stream ended before its list of hashes"
	e=$(LC_ALL=C sort <"./.relay-expected-$t") || relay_drop 5 "cannot read the list of hashes"
	rm -f -- "./.relay-expected-$t" "./.relay-order-$t" "./.relay-order-$t.done"
	if [ -n "$rh" ]; then
		[ "$rbs" = 0 ] || relay_drop 5 "cannot hash the files unpacked into $x"
		h=$(grep '^[0-9a-f]\{64\} [ *]\./' "$hf")
		[ $? -le 1 ] || relay_drop 5 "cannot read the hashes of $x"
		s=$(cat "$sf") || relay_drop 5 "cannot read the sizes of $x"
		printf '\036relay-hashes\n%s\n\036relay-sizes\n%s\n\036relay-done\n' "$h" "$s"
		a=$(printf '%s\n' "$h" | sed 's/^\([0-9a-f]\{64\}\) [ *]/\1 /' | LC_ALL=C sort)
		nf=$(find . -type f | wc -l)
		ne=$(printf '%s\n' "$e" | grep -c .)
		[ "$a" = "$e" ] && [ "$nf" -eq "$ne" ] || relay_drop 6 "the files written in the guest differ from the ones sent; nothing was replaced"
	else
		printf '\036relay-nohash\n'
	fi
	cd /
	rm -f -- "$hf" "$sf" "$fl"
	if [ -L "$d" ]; then relay_drop 4 "guest path $d became a symbolic link; nothing was replaced"; fi
	if [ ! -e "$d" ]; then
		mv -- "$x" "$d" || relay_drop 5 "cannot move the pushed tree into place at $d"
	else
		relay_merge "$x" "$d" || relay_drop 5 "could not move every pushed file into $d; the folder holds part of the push"
		rm -rf -- "$x"
	fi
	printf '\036relay-committed\n'
}
