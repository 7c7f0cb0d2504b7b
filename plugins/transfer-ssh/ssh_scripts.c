/*
 * The guest-side programs (see ssh_scripts.h). Written for any POSIX sh:
 * dash, bash, busybox ash, the macOS /bin/sh. Variables are prefixed
 * (relay_, r*) because POSIX sh functions share the script's variables.
 * One C string per script line, so the scripts read as scripts; clang-format
 * is kept away from them.
 */
#include "ssh_scripts.h"

// clang-format off

/* Shared functions: failure lines, process-group lookup and the sweep that
 * kills every live member of a group and confirms none is left. The sweep
 * lists /proc through one awk when it can (a few ms for a hundred
 * processes), else in the shell, else with ps. */

#define SSH_SCRIPT_LIB \
	"relay_fail() {\n" \
	"\tprintf 'relay-ssh: %s\\n' \"$2\" >&2\n" \
	"\texit \"$1\"\n" \
	"}\n" \
	"relay_pg() {\n" \
	"\trg=\n" \
	"\t{ read -r rs < \"/proc/$1/stat\"; } 2>/dev/null || return 1\n" \
	"\trs=${rs##*\") \"}\n" \
	"\tset -f\n" \
	"\tset -- $rs\n" \
	"\tset +f\n" \
	"\tcase $1 in Z | X | x) return 1 ;; esac\n" \
	"\trg=$3\n" \
	"}\n" \
	"relay_psline() {\n" \
	"\t[ \"$3\" = \"$1\" ] || return 0\n" \
	"\t[ \"$2\" = \"$$\" ] && return 0\n" \
	"\tcase $4 in Z*) return 0 ;; esac\n" \
	"\tcase $(kill -s KILL \"$2\" 2>&1) in '') rl=1 ;; *ermi*) rl=1 ;; esac\n" \
	"\treturn 0\n" \
	"}\n" \
	"relay_sweep() {\n" \
	"\tri=0\n" \
	"\twhile :; do\n" \
	"\t\trl=0\n" \
	"\t\tif [ -r /proc/self/stat ] && command -v awk >/dev/null 2>&1; then\n" \
	"\t\t\trx=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v g=\"$1\" -v me=$$ '{ p = $1; s = $0; sub(/.*\\) /, \"\", s); split(s, f, \" \"); if (f[3] == g && p != me && f[1] != \"Z\" && f[1] != \"X\") print p }') || return 2\n" \
	"\t\t\tfor rp in $rx; do\n" \
	"\t\t\t\tif kill -s KILL \"$rp\" 2>/dev/null; then rl=1\n" \
	"\t\t\t\telif relay_pg \"$rp\" && [ \"$rg\" = \"$1\" ]; then rl=1; fi\n" \
	"\t\t\tdone\n" \
	"\t\telif [ -r /proc/self/stat ]; then\n" \
	"\t\t\tfor rd in /proc/[0-9]*; do\n" \
	"\t\t\t\trp=${rd#/proc/}\n" \
	"\t\t\t\t[ \"$rp\" = \"$$\" ] && continue\n" \
	"\t\t\t\trelay_pg \"$rp\" || continue\n" \
	"\t\t\t\t[ \"$rg\" = \"$1\" ] || continue\n" \
	"\t\t\t\trl=1\n" \
	"\t\t\t\tkill -s KILL \"$rp\" 2>/dev/null\n" \
	"\t\t\tdone\n" \
	"\t\telif command -v ps >/dev/null 2>&1; then\n" \
	"\t\t\trx=$(ps -A -o pid= -o pgid= -o stat= 2>/dev/null) || return 2\n" \
	"\t\t\tro=$IFS\n" \
	"\t\t\tIFS='\n" \
	"'\n" \
	"\t\t\tset -f\n" \
	"\t\t\tfor rline in $rx; do\n" \
	"\t\t\t\tIFS=$ro\n" \
	"\t\t\t\trelay_psline \"$1\" $rline\n" \
	"\t\t\tdone\n" \
	"\t\t\tIFS=$ro\n" \
	"\t\t\tset +f\n" \
	"\t\telse\n" \
	"\t\t\treturn 2\n" \
	"\t\tfi\n" \
	"\t\t[ \"$rl\" = 0 ] && return 0\n" \
	"\t\tri=$((ri + 1))\n" \
	"\t\t[ \"$ri\" -ge 50 ] && return 1\n" \
	"\t\tsleep 0.1 2>/dev/null || sleep 1\n" \
	"\tdone\n" \
	"}\n"

/* The hash tool: `openssl dgst -sha256 -r` when it prints the coreutils
 * format (it uses the CPU's SHA extensions: three times faster than
 * coreutils on the build machine), else sha256sum, else shasum -a 256.
 * relay_facts prints the facts block of ssh_facts.h for its operands. */
#define SSH_SCRIPT_FACTS \
	"relay_hashtool() {\n" \
	"\trz='e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 */dev/null'\n" \
	"\tif command -v openssl >/dev/null 2>&1 && [ \"$(openssl dgst -sha256 -r /dev/null 2>/dev/null)\" = \"$rz\" ]; then\n" \
	"\t\trh='openssl dgst -sha256 -r'\n" \
	"\telif command -v sha256sum >/dev/null 2>&1; then\n" \
	"\t\trh=sha256sum\n" \
	"\telif command -v shasum >/dev/null 2>&1; then\n" \
	"\t\trh='shasum -a 256'\n" \
	"\telse\n" \
	"\t\treturn 1\n" \
	"\tfi\n" \
	"}\n" \
	"relay_facts() {\n" \
	"\trelay_hashtool || { printf '\\036relay-nohash\\n'; return 0; }\n" \
	"\tprintf '\\036relay-hashes\\n'\n" \
	"\tfind \"$@\" -type f -exec $rh {} + || return 1\n" \
	"\tprintf '\\036relay-sizes\\n'\n" \
	"\tfind \"$@\" -type f -exec wc -c {} + || return 1\n" \
	"\tprintf '\\036relay-done\\n'\n" \
	"}\n"

const char ssh_script_exec[] = SSH_SCRIPT_LIB
	"relay_t=$1\n"
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
	"\tprintf '\\036relay %s nocwd\\n' \"$relay_t\"\n"
	"\texit 125\n"
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

const char ssh_script_push[] = SSH_SCRIPT_LIB SSH_SCRIPT_FACTS
	"relay_merge() {\n"
	"\tfor e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
	"\t\t[ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
	"\t\tn=${e##*/}\n"
	"\t\tif [ -L \"$2/$n\" ]; then rm -f -- \"$2/$n\" || return 1; fi\n"
	"\t\tif [ -d \"$e\" ] && [ -d \"$2/$n\" ]; then\n"
	"\t\t\trelay_merge \"$e\" \"$2/$n\" || return 1\n"
	"\t\telif [ -d \"$2/$n\" ]; then\n"
	"\t\t\tprintf 'relay-ssh: %s\\n' \"the pushed file $n would replace the guest folder $2/$n\" >&2\n"
	"\t\t\treturn 1\n"
	"\t\telse\n"
	"\t\t\tmv -f -- \"$e\" \"$2/$n\" || return 1\n"
	"\t\tfi\n"
	"\tdone\n"
	"\treturn 0\n"
	"}\n"
	"relay_drop() {\n"
	"\tcd /\n"
	"\trm -rf -- \"$x\"\n"
	"\trelay_fail \"$1\" \"$2\"\n"
	"}\n"
	"umask 077\n"
	"t=$1 d=$2 k=$3\n"
	"if [ -L \"$d\" ]; then relay_fail 4 \"guest path $d is a symbolic link; the transport never writes through one\"; fi\n"
	"if [ \"$k\" = file ]; then\n"
	"\tif [ -d \"$d\" ]; then relay_fail 4 \"guest path $d is a folder, so a file cannot replace it\"; fi\n"
	"elif [ -e \"$d\" ] && [ ! -d \"$d\" ]; then\n"
	"\trelay_fail 4 \"guest path $d exists and is not a folder\"\n"
	"fi\n"
	"p=${d%/*}\n"
	"[ -n \"$p\" ] || p=/\n"
	"mkdir -p -- \"$p\" 2>/dev/null\n"
	"[ -d \"$p\" ] || relay_fail 5 \"cannot create the guest folder $p\"\n"
	"x=$p/.relay-push-$t\n"
	"mkdir -- \"$x\" 2>/dev/null || relay_fail 5 \"cannot create the guest folder $x\"\n"
	"tar -x -o -f - -C \"$x\" || relay_drop 5 \"the guest tar could not unpack the stream into $x\"\n"
	"cd -- \"$x\" || relay_drop 5 \"cannot enter the guest folder $x\"\n"
	"b=$(find . ! -type f ! -type d -print) || relay_drop 5 \"cannot list $x\"\n"
	"[ -z \"$b\" ] || relay_drop 4 \"the stream unpacked to something other than files and folders\"\n"
	"ex=./.relay-expected-$t\n"
	"[ -f \"$ex\" ] || relay_drop 5 \"the stream ended before its list of hashes\"\n"
	"e=$(LC_ALL=C sort <\"$ex\") || relay_drop 5 \"cannot read the list of hashes\"\n"
	"rm -f -- \"$ex\"\n"
	"if relay_hashtool; then\n"
	"\th=$(find . -type f -exec $rh {} +) || relay_drop 5 \"cannot hash the files unpacked into $x\"\n"
	"\ts=$(find . -type f -exec wc -c {} +) || relay_drop 5 \"cannot measure the files unpacked into $x\"\n"
	"\tprintf '\\036relay-hashes\\n%s\\n\\036relay-sizes\\n%s\\n\\036relay-done\\n' \"$h\" \"$s\"\n"
	"\ta=$(printf '%s\\n' \"$h\" | sed 's/^\\([0-9a-f]\\{64\\}\\) [ *]/\\1 /' | LC_ALL=C sort)\n"
	"\t[ \"$a\" = \"$e\" ] || relay_drop 6 \"the files written in the guest differ from the ones sent; nothing was replaced\"\n"
	"else\n"
	"\tprintf '\\036relay-nohash\\n'\n"
	"fi\n"
	"cd /\n"
	"if [ -L \"$d\" ]; then relay_drop 4 \"guest path $d became a symbolic link; nothing was replaced\"; fi\n"
	"if [ \"$k\" = file ]; then\n"
	"\tif [ -d \"$d\" ]; then relay_drop 4 \"guest path $d became a folder; nothing was replaced\"; fi\n"
	"\tmv -f -- \"$x/f\" \"$d\" || relay_drop 5 \"cannot move the pushed file into place at $d\"\n"
	"\trmdir -- \"$x\" 2>/dev/null\n"
	"elif [ ! -e \"$d\" ]; then\n"
	"\tmv -- \"$x\" \"$d\" || relay_drop 5 \"cannot move the pushed tree into place at $d\"\n"
	"else\n"
	"\trelay_merge \"$x\" \"$d\" || relay_drop 5 \"could not move every pushed file into $d; the folder holds part of the push\"\n"
	"\trm -rf -- \"$x\"\n"
	"fi\n"
	"printf '\\036relay-committed\\n'\n";

const char ssh_script_push_abort[] = ""
	"p=${2%/*}\n"
	"[ -n \"$p\" ] || p=/\n"
	"rm -rf -- \"$p/.relay-push-$1\"\n";

const char ssh_script_pull_check[] = SSH_SCRIPT_LIB SSH_SCRIPT_FACTS
	"p=$1 k=$2\n"
	"if [ -L \"$p\" ]; then relay_fail 4 \"guest path $p is a symbolic link; pulls never follow links\"; fi\n"
	"[ -e \"$p\" ] || relay_fail 3 \"guest path $p does not exist\"\n"
	"if [ \"$k\" = file ]; then\n"
	"\t[ -f \"$p\" ] || relay_fail 4 \"guest path $p is not a regular file (pulls refuse links, devices, FIFOs and sockets)\"\n"
	"\tq=${p%/*}\n"
	"\t[ -n \"$q\" ] || q=/\n"
	"\tcd -- \"$q\" || relay_fail 5 \"cannot enter the guest folder $q\"\n"
	"\tb=./${p##*/}\n"
	"\tcase $b in *'\n"
	"'* | *\\\\*) relay_fail 4 \"guest path $p has a newline or backslash in its name\" ;; esac\n"
	"\trelay_facts \"$b\" || relay_fail 5 \"cannot hash $p\"\n"
	"\texit 0\n"
	"fi\n"
	"[ -d \"$p\" ] || relay_fail 4 \"guest path $p is neither a regular file nor a folder\"\n"
	"cd -- \"$p\" || relay_fail 5 \"cannot enter the guest folder $p\"\n"
	"b=$(find . \\( -type l -o \\( ! -type f ! -type d \\) -o -name '*\n"
	"*' -o -name '*\\\\*' \\) -print) || relay_fail 5 \"cannot list every entry under $p\"\n"
	"if [ -n \"$b\" ]; then\n"
	"\tb=$(printf '%s\\n' \"$b\" | head -n 3 | tr '\\n' ' ')\n"
	"\trelay_fail 4 \"refused $b(pulls take no symbolic links, devices, FIFOs, sockets or names with a newline or backslash)\"\n"
	"fi\n"
	"relay_facts . || relay_fail 5 \"cannot hash the files under $p\"\n";

const char ssh_script_pull_stream[] = ""
	"p=$1 k=$2\n"
	"if [ -L \"$p\" ]; then printf 'relay-ssh: %s\\n' \"guest path $p is a symbolic link; pulls never follow links\" >&2; exit 4; fi\n"
	"if [ \"$k\" = file ]; then\n"
	"\tq=${p%/*}\n"
	"\t[ -n \"$q\" ] || q=/\n"
	"\tcd -- \"$q\" || exit 5\n"
	"\texec tar -c -f - \"./${p##*/}\"\n"
	"fi\n"
	"cd -- \"$p\" || exit 5\n"
	"exec tar -c -f - .\n";

// clang-format on
