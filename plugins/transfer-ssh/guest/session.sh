# transfer-ssh session (ssh_session.h): every exec, push and pull runs in one of these.
# Standard input starts with one line, the operation and its arguments, each word
# in POSIX single quotes; the rest of standard input belongs to the operation.
# Nothing runs unless the line arrived whole (read fails at end of input without
# a newline). A session may be started before it is needed: until its line
# arrives it only waits.
IFS= read -r relay_line || exit 0
case $relay_line in
"'exec' "* | "'push' "* | "'pull' "*) ;;
*) exit 0 ;;
esac
eval "set -- $relay_line"
relay_what=$1
shift
case $relay_what in
exec) relay_op_exec "$@" ;;
push) relay_op_push "$@" ;;
pull) relay_op_pull "$@" ;;
esac
exit 0
