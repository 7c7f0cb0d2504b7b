# transfer-ssh exec wrapper (ssh_exec.h). Op args: <token>. Needs lib.sh.
relay_op_exec() {
	relay_t=$1
	relay_g=$$
	relay_pg $$ && relay_g=$rg
	printf '\036relay %s start %s\n' "$relay_t" "$relay_g"
	relay_c=$(cat) || exit 0
	case $relay_c in
	*"relay_go=$relay_t") ;;
	*) exit 0 ;;
	esac
	exec </dev/null
	relay_nocwd() {
		printf '\036relay %s nocwd\n' "$relay_t"
		exit 125
	}
	eval "$relay_c"
	env -- "$@"
	relay_rc=$?
	relay_sweep "$relay_g"
	relay_sc=$?
	printf '\036relay %s end %s %s\n' "$relay_t" "$relay_rc" "$relay_sc"
	exit "$relay_rc"
}
