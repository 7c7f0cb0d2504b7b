# transfer-ssh pull (ssh_pull.h). Op args: <token> <guest path> file|tree. Needs lib.sh, facts.sh.
# Refuses links and special files, prints the facts block, then
# "\036relay-stream <token>" and the tar stream, all on standard output.
relay_op_pull() {
	t=$1 p=$2 k=$3
	if [ -L "$p" ]; then relay_fail 4 "guest path $p is a symbolic link; pulls never follow links"; fi
	[ -e "$p" ] || relay_fail 3 "guest path $p does not exist"
	if [ "$k" = file ]; then
		[ -f "$p" ] || relay_fail 4 "guest path $p is not a regular file (pulls refuse links, devices, FIFOs and sockets)"
		q=${p%/*}
		[ -n "$q" ] || q=/
		cd -- "$q" || relay_fail 5 "cannot enter the guest folder $q"
		b=./${p##*/}
		case $b in *'
'* | *\\*) relay_fail 4 "guest path $p has a newline or backslash in its name" ;; esac
		relay_facts_file "$b" || relay_fail 5 "cannot hash $p"
		printf '\036relay-stream %s\n' "$t"
		exec tar -c -f - "$b"
	fi
	[ -d "$p" ] || relay_fail 4 "guest path $p is neither a regular file nor a folder"
	cd -- "$p" || relay_fail 5 "cannot enter the guest folder $p"
	b=$(find . \( -type l -o \( ! -type f ! -type d \) -o -name '*
*' -o -name '*\\*' \) -print) || relay_fail 5 "cannot list every entry under $p"
	if [ -n "$b" ]; then
		b=$(printf '%s\n' "$b" | head -n 3 | tr '\n' ' ')
		relay_fail 4 "refused $b(pulls take no symbolic links, devices, FIFOs, sockets or names with a newline or backslash)"
	fi
	relay_facts . || relay_fail 5 "cannot hash the files under $p"
	printf '\036relay-stream %s\n' "$t"
	exec tar -c -f - .
}
