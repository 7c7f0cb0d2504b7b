/*
 * The guest-side programs (see ssh_scripts.h). Written for any POSIX sh:
 * dash, bash, busybox ash, the macOS /bin/sh. Variables are prefixed
 * (relay_, r*) because POSIX sh functions share the script's variables.
 */
#include "ssh_scripts.h"

/* Shared functions: failure lines, process-group lookup and the sweep that
 * kills every live member of a group and confirms none is left. */
#define SSH_SCRIPT_LIB                                                                                       \
	"relay_fail() {\n"                                                                                   \
	"	printf 'relay-ssh: %s\\n' \"$2\" >&2\n"                                                            \
	"	exit \"$1\"\n"                                                                                     \
	"}\n"                                                                                                \
	"relay_pg() {\n"                                                                                     \
	"	rg=\n"                                                                                             \
	"	{ read -r rs < \"/proc/$1/stat\"; } 2>/dev/null || return 1\n"                                     \
	"	rs=${rs##*\") \"}\n"                                                                               \
	"	set -f\n"                                                                                          \
	"	set -- $rs\n"                                                                                      \
	"	set +f\n"                                                                                          \
	"	case $1 in Z | X | x) return 1 ;; esac\n"                                                          \
	"	rg=$3\n"                                                                                           \
	"}\n"                                                                                                \
	"relay_psline() {\n"                                                                                 \
	"	[ \"$3\" = \"$1\" ] || return 0\n"                                                                 \
	"	[ \"$2\" = \"$$\" ] && return 0\n"                                                                 \
	"	case $4 in Z*) return 0 ;; esac\n"                                                                 \
	"	case $(kill -s KILL \"$2\" 2>&1) in '') rl=1 ;; *ermi*) rl=1 ;; esac\n"                            \
	"	return 0\n"                                                                                        \
	"}\n"                                                                                                \
	"relay_sweep() {\n"                                                                                  \
	"	ri=0\n"                                                                                            \
	"	while :; do\n"                                                                                     \
	"		rl=0\n"                                                                                           \
	"		if [ -r /proc/self/stat ] && command -v awk >/dev/null 2>&1; then\n"                              \
	"			rx=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v g=\"$1\" -v me=$$ '{ p = "                       \
	"$1; s = $0; "                                                                                       \
	"sub(/.*\\) /, \"\", s); split(s, f, \" \"); if (f[3] == g && p != me && f[1] != \"Z\" && "          \
	"f[1] != \"X\") print p }') || return 2\n"                                                           \
	"			for rp in $rx; do\n"                                                                             \
	"				if kill -s KILL \"$rp\" 2>/dev/null; then rl=1\n"                                               \
	"				elif relay_pg \"$rp\" && [ \"$rg\" = \"$1\" ]; then rl=1; fi\n"                                 \
	"			done\n"                                                                                          \
	"		elif [ -r /proc/self/stat ]; then\n"                                                              \
	"			for rd in /proc/[0-9]*; do\n"                                                                    \
	"				rp=${rd#/proc/}\n"                                                                              \
	"				[ \"$rp\" = \"$$\" ] && continue\n"                                                             \
	"				relay_pg \"$rp\" || continue\n"                                                                 \
	"				[ \"$rg\" = \"$1\" ] || continue\n"                                                             \
	"				rl=1\n"                                                                                         \
	"				kill -s KILL \"$rp\" 2>/dev/null\n"                                                             \
	"			done\n"                                                                                          \
	"		elif command -v ps >/dev/null 2>&1; then\n"                                                       \
	"			rx=$(ps -A -o pid= -o pgid= -o stat= 2>/dev/null) || return 2\n"                                 \
	"			ro=$IFS\n"                                                                                       \
	"			IFS='\n'\n"                                                                                      \
	"			set -f\n"                                                                                        \
	"			for rline in $rx; do\n"                                                                          \
	"				IFS=$ro\n"                                                                                      \
	"				relay_psline \"$1\" $rline\n"                                                                   \
	"			done\n"                                                                                          \
	"			IFS=$ro\n"                                                                                       \
	"			set +f\n"                                                                                        \
	"		else\n"                                                                                           \
	"			return 2\n"                                                                                      \
	"		fi\n"                                                                                             \
	"		[ \"$rl\" = 0 ] && return 0\n"                                                                    \
	"		ri=$((ri + 1))\n"                                                                                 \
	"		[ \"$ri\" -ge 50 ] && return 1\n"                                                                 \
	"		sleep 0.1 2>/dev/null || sleep 1\n"                                                               \
	"	done\n"                                                                                            \
	"}\n"

/* Facts block: hashes and sizes (wc -c) of every regular file under the
 * operands, between marker lines. The hash tool is `openssl dgst -sha256 -r`
 * when it prints the coreutils format (it uses the CPU's SHA extensions:
 * about three times faster than coreutils here), else sha256sum, else
 * shasum -a 256. */
#define SSH_SCRIPT_FACTS                                                                                     \
	"relay_facts() {\n"                                                                                  \
	"	rz='e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 */dev/null'\n"                \
	"	if command -v openssl >/dev/null 2>&1 && [ \"$(openssl dgst -sha256 -r /dev/null "                 \
	"2>/dev/null)\" = "                                                                                  \
	"\"$rz\" ]; then rh='openssl dgst -sha256 -r'\n"                                                     \
	"	elif command -v sha256sum >/dev/null 2>&1; then rh=sha256sum\n"                                    \
	"	elif command -v shasum >/dev/null 2>&1; then rh='shasum -a 256'\n"                                 \
	"	else printf '\\036relay-nohash\\n'; return 0; fi\n"                                                \
	"	printf '\\036relay-hashes\\n'\n"                                                                   \
	"	find \"$@\" -type f -exec $rh {} + || return 1\n"                                                  \
	"	printf '\\036relay-sizes\\n'\n"                                                                    \
	"	find \"$@\" -type f -exec wc -c {} + || return 1\n"                                                \
	"	printf '\\036relay-done\\n'\n"                                                                     \
	"}\n"

const char ssh_script_exec[] =
    SSH_SCRIPT_LIB "relay_t=$1\n"
                   "relay_g=$$\n"
                   "relay_pg $$ && relay_g=$rg\n"
                   "printf '\\036relay %s start %s\\n' \"$relay_t\" \"$relay_g\"\n"
                   "relay_c=$(cat) || exit 0\n"
                   "case $relay_c in\n"
                   "*\"relay_go=$relay_t\") ;;\n"
                   "*) exit 0 ;;\n"
                   "esac\n"
                   "exec </dev/null\n"
                   "relay_nocwd() {\n"
                   "	printf '\\036relay %s nocwd\\n' \"$relay_t\"\n"
                   "	exit 125\n"
                   "}\n"
                   "eval \"$relay_c\"\n"
                   "env -- \"$@\"\n"
                   "relay_rc=$?\n"
                   "relay_sweep \"$relay_g\"\n"
                   "relay_sc=$?\n"
                   "printf '\\036relay %s end %s %s\\n' \"$relay_t\" \"$relay_rc\" \"$relay_sc\"\n"
                   "exit \"$relay_rc\"\n";

const char ssh_script_kill[] = SSH_SCRIPT_LIB
    "case $1 in '' | *[!0-9]* | 0 | 1) relay_fail 2 \"refusing to kill process group '$1'\" ;; esac\n"
    "kill -s KILL -- \"-$1\" 2>/dev/null || kill -KILL -- \"-$1\" 2>/dev/null\n"
    "relay_sweep \"$1\"\n";

const char ssh_script_push_receive[] = SSH_SCRIPT_LIB SSH_SCRIPT_FACTS
    "umask 077\n"
    "t=$1 d=$2 k=$3\n"
    "if [ -L \"$d\" ]; then relay_fail 4 \"guest path $d is a symbolic link; the transport never writes "
    "through one\"; fi\n"
    "if [ \"$k\" = file ]; then\n"
    "	if [ -d \"$d\" ]; then relay_fail 4 \"guest path $d is a folder, so a file cannot replace it\"; fi\n"
    "elif [ -e \"$d\" ] && [ ! -d \"$d\" ]; then\n"
    "	relay_fail 4 \"guest path $d exists and is not a folder\"\n"
    "fi\n"
    "p=${d%/*}\n"
    "[ -n \"$p\" ] || p=/\n"
    "mkdir -p -- \"$p\" 2>/dev/null\n"
    "[ -d \"$p\" ] || relay_fail 5 \"cannot create the guest folder $p\"\n"
    "x=$p/.relay-push-$t\n"
    "mkdir -- \"$x\" 2>/dev/null || relay_fail 5 \"cannot create the guest folder $x\"\n"
    "if ! tar -x -o -f - -C \"$x\"; then\n"
    "	rm -rf -- \"$x\"\n"
    "	relay_fail 5 \"the guest tar could not unpack the stream into $x\"\n"
    "fi\n"
    "cd -- \"$x\" || relay_fail 5 \"cannot enter the guest folder $x\"\n"
    "b=$(find . ! -type f ! -type d -print) || { cd /; rm -rf -- \"$x\"; relay_fail 5 \"cannot list $x\"; }\n"
    "if [ -n \"$b\" ]; then\n"
    "	cd /\n"
    "	rm -rf -- \"$x\"\n"
    "	relay_fail 4 \"the stream unpacked to something other than files and folders\"\n"
    "fi\n"
    "relay_facts . || { cd /; rm -rf -- \"$x\"; relay_fail 5 \"cannot hash the files unpacked into $x\"; }\n";

const char ssh_script_push_commit[] = SSH_SCRIPT_LIB
    "relay_merge() {\n"
    "	for e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "		[ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
    "		n=${e##*/}\n"
    "		if [ -L \"$2/$n\" ]; then rm -f -- \"$2/$n\" || return 1; fi\n"
    "		if [ -d \"$e\" ] && [ -d \"$2/$n\" ]; then\n"
    "			relay_merge \"$e\" \"$2/$n\" || return 1\n"
    "		elif [ -d \"$2/$n\" ]; then\n"
    "			printf 'relay-ssh: %s\\n' \"the pushed file $n would replace the guest folder "
    "$2/$n\" >&2\n"
    "			return 1\n"
    "		else\n"
    "			mv -f -- \"$e\" \"$2/$n\" || return 1\n"
    "		fi\n"
    "	done\n"
    "	return 0\n"
    "}\n"
    "umask 077\n"
    "t=$1 d=$2 k=$3\n"
    "p=${d%/*}\n"
    "[ -n \"$p\" ] || p=/\n"
    "x=$p/.relay-push-$t\n"
    "[ -d \"$x\" ] || relay_fail 3 \"the pushed copy $x is gone from the guest\"\n"
    "if [ -L \"$d\" ]; then rm -rf -- \"$x\"; relay_fail 4 \"guest path $d became a symbolic link; nothing "
    "was replaced\"; fi\n"
    "if [ \"$k\" = file ]; then\n"
    "	if [ -d \"$d\" ]; then rm -rf -- \"$x\"; relay_fail 4 \"guest path $d became a folder; nothing was "
    "replaced\"; fi\n"
    "	mv -f -- \"$x/f\" \"$d\" || { rm -rf -- \"$x\"; relay_fail 5 \"cannot move the pushed file into "
    "place at $d\"; }\n"
    "	rmdir -- \"$x\" 2>/dev/null\n"
    "	exit 0\n"
    "fi\n"
    "if [ ! -e \"$d\" ]; then\n"
    "	mv -- \"$x\" \"$d\" || { rm -rf -- \"$x\"; relay_fail 5 \"cannot move the pushed tree into place at "
    "$d\"; }\n"
    "	exit 0\n"
    "fi\n"
    "relay_merge \"$x\" \"$d\" || { rm -rf -- \"$x\"; relay_fail 5 \"could not move every pushed file into "
    "$d; the folder holds part of the push\"; }\n"
    "rm -rf -- \"$x\"\n";

const char ssh_script_push_abort[] = "p=${2%/*}\n"
                                     "[ -n \"$p\" ] || p=/\n"
                                     "rm -rf -- \"$p/.relay-push-$1\"\n";

const char ssh_script_pull_check[] = SSH_SCRIPT_LIB SSH_SCRIPT_FACTS
    "p=$1 k=$2\n"
    "if [ -L \"$p\" ]; then relay_fail 4 \"guest path $p is a symbolic link; pulls never follow links\"; fi\n"
    "[ -e \"$p\" ] || relay_fail 3 \"guest path $p does not exist\"\n"
    "if [ \"$k\" = file ]; then\n"
    "	[ -f \"$p\" ] || relay_fail 4 \"guest path $p is not a regular file (pulls refuse links, devices, "
    "FIFOs and sockets)\"\n"
    "	q=${p%/*}\n"
    "	[ -n \"$q\" ] || q=/\n"
    "	cd -- \"$q\" || relay_fail 5 \"cannot enter the guest folder $q\"\n"
    "	b=./${p##*/}\n"
    "	case $b in *'\n'* | *\\\\*) relay_fail 4 \"guest path $p has a newline or backslash in its name\" "
    ";; esac\n"
    "	relay_facts \"$b\" || relay_fail 5 \"cannot hash $p\"\n"
    "	exit 0\n"
    "fi\n"
    "[ -d \"$p\" ] || relay_fail 4 \"guest path $p is neither a regular file nor a folder\"\n"
    "cd -- \"$p\" || relay_fail 5 \"cannot enter the guest folder $p\"\n"
    "b=$(find . \\( -type l -o \\( ! -type f ! -type d \\) -o -name '*\n*' -o -name '*\\\\*' \\) -print) "
    "|| relay_fail 5 \"cannot list every entry under $p\"\n"
    "if [ -n \"$b\" ]; then\n"
    "	b=$(printf '%s\\n' \"$b\" | head -n 3 | tr '\\n' ' ')\n"
    "	relay_fail 4 \"refused $b(pulls take no symbolic links, devices, FIFOs, sockets or names with a "
    "newline or backslash)\"\n"
    "fi\n"
    "relay_facts . || relay_fail 5 \"cannot hash the files under $p\"\n";

const char ssh_script_pull_stream[] =
    "p=$1 k=$2\n"
    "if [ -L \"$p\" ]; then printf 'relay-ssh: %s\\n' \"guest path $p is a symbolic link; pulls never "
    "follow links\" >&2; exit 4; fi\n"
    "if [ \"$k\" = file ]; then\n"
    "	q=${p%/*}\n"
    "	[ -n \"$q\" ] || q=/\n"
    "	cd -- \"$q\" || exit 5\n"
    "	exec tar -c -f - \"./${p##*/}\"\n"
    "fi\n"
    "cd -- \"$p\" || exit 5\n"
    "exec tar -c -f - .\n";
