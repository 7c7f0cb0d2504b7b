# transfer-ssh exec wrapper (ssh_exec.h). Op args: <token> [stdin]. Needs lib.sh.
# Without "stdin" the command text is the whole rest of standard input and the
# command reads /dev/null. With "stdin" (RELAY_EXEC_STDIO_BYTES) the text ends at
# its go line, read line by line so that nothing after it is consumed, and the
# command reads the rest of standard input.
# What the command leaves running when it exits on its own keeps running
# (spec/guest.md §16.1): there is no sweep after a normal end, and no look at what
# is left either (a walk of /proc costs more than the rest of an exec on a
# busy guest), so the end line's second number is 3, "not looked at". The
# host's kill script sweeps the group on a timeout or cancellation.
relay_op_exec() {
	relay_t=$1
	relay_g=$$
	relay_pg $$ && relay_g=$rg
	printf '\036relay %s start %s\n' "$relay_t" "$relay_g"
	if [ "${2-}" = stdin ]; then
		relay_c=
		relay_ok=
		while IFS= read -r relay_l; do
			if [ "$relay_l" = "relay_go=$relay_t" ]; then
				relay_ok=1
				break
			fi
			relay_c="$relay_c$relay_l
"
		done
		[ -n "$relay_ok" ] || exit 0
	else
		relay_c=$(cat) || exit 0
		case $relay_c in
		*"relay_go=$relay_t") ;;
		*) exit 0 ;;
		esac
		exec </dev/null
	fi
	relay_nocwd() {
		printf '\036relay %s nocwd\n' "$relay_t"
		exit 125
	}
	eval "$relay_c"
	env -- "$@"
	relay_rc=$?
	printf '\036relay %s end %s 3\n' "$relay_t" "$relay_rc"
	exit "$relay_rc"
}
