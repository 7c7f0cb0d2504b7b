# transfer-ssh push (ssh_push.h). Args: <token> <guest path> file|tree. Needs lib.sh, facts.sh.
relay_merge() {
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		n=${e##*/}
		if [ -L "$2/$n" ]; then rm -f -- "$2/$n" || return 1; fi
		if [ -d "$e" ] && [ -d "$2/$n" ]; then
			relay_merge "$e" "$2/$n" || return 1
		elif [ -d "$2/$n" ]; then
			printf 'relay-ssh: %s\n' "the pushed file $n would replace the guest folder $2/$n" >&2
			return 1
		else
			mv -f -- "$e" "$2/$n" || return 1
		fi
	done
	return 0
}
relay_nap() {
	sleep 0.05 2>/dev/null || sleep 1
}
relay_feed() {
	# In the copy's folder: prints, NUL-terminated, each file of the order
	# list once tar has finished it (the next one exists, or tar ended).
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
umask 077
t=$1 d=$2 k=$3
if [ -L "$d" ]; then relay_fail 4 "guest path $d is a symbolic link; the transport never writes through one"; fi
if [ "$k" = file ]; then
	if [ -d "$d" ]; then relay_fail 4 "guest path $d is a folder, so a file cannot replace it"; fi
elif [ -e "$d" ] && [ ! -d "$d" ]; then
	relay_fail 4 "guest path $d exists and is not a folder"
fi
p=${d%/*}
[ -n "$p" ] || p=/
mkdir -p -- "$p" 2>/dev/null
[ -d "$p" ] || relay_fail 5 "cannot create the guest folder $p"
x=$p/.relay-push-$t hf=$p/.relay-push-$t.hashes sf=$p/.relay-push-$t.sizes fl=$p/.relay-push-$t.untarred rb= rh=
mkdir -- "$x" 2>/dev/null || relay_fail 5 "cannot create the guest folder $x"
# Hash and measure each file as soon as tar has finished it, while tar
# unpacks the next ones (hashes to $hf, sizes to $sf, taken together).
if relay_hashtool; then
	(cd -- "$x" && relay_feed "$t" "$fl" |
		xargs -0 -n 256 sh -c "$rh \"\$@\" >&3 && wc -c \"\$@\"" relay-hash >"$sf" 3>"$hf") &
	rb=$!
fi
tar -x -o -f - -C "$x"
rt=$?
: >"$fl"
rbs=0
[ -z "$rb" ] || wait "$rb" || rbs=$?
rb=
[ "$rt" = 0 ] || relay_drop 5 "the guest tar could not unpack the stream into $x"
cd -- "$x" || relay_drop 5 "cannot enter the guest folder $x"
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
if [ "$k" = file ]; then
	if [ -d "$d" ]; then relay_drop 4 "guest path $d became a folder; nothing was replaced"; fi
	mv -f -- "$x/f" "$d" || relay_drop 5 "cannot move the pushed file into place at $d"
	rmdir -- "$x" 2>/dev/null
elif [ ! -e "$d" ]; then
	mv -- "$x" "$d" || relay_drop 5 "cannot move the pushed tree into place at $d"
else
	relay_merge "$x" "$d" || relay_drop 5 "could not move every pushed file into $d; the folder holds part of the push"
	rm -rf -- "$x"
fi
printf '\036relay-committed\n'
