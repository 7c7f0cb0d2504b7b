# transfer-ssh guest library: the hash tool and the facts block (ssh_facts.h).
# relay_hashtool [small]: sets rh. openssl first (about 4x faster than
# coreutils on large data); with "small", sha256sum first (it starts in a
# third of openssl's time, which is what counts for a few small files).
relay_hashtool() {
	if [ "${1:-}" = small ] && command -v sha256sum >/dev/null 2>&1; then
		rh=sha256sum
		return 0
	fi
	rz='e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 */dev/null'
	if command -v openssl >/dev/null 2>&1 && [ "$(openssl dgst -sha256 -r /dev/null 2>/dev/null)" = "$rz" ]; then
		rh='openssl dgst -sha256 -r'
	elif command -v sha256sum >/dev/null 2>&1; then
		rh=sha256sum
	elif command -v shasum >/dev/null 2>&1; then
		rh='shasum -a 256'
	else
		return 1
	fi
}
relay_facts() {
	relay_hashtool || { printf '\036relay-nohash\n'; return 0; }
	printf '\036relay-hashes\n'
	find "$@" -type f -exec $rh {} + || return 1
	printf '\036relay-sizes\n'
	find "$@" -type f -exec wc -c {} + || return 1
	printf '\036relay-done\n'
}
# The facts block of one regular file ./<name> in the current folder.
relay_facts_file() {
	relay_hashtool small || { printf '\036relay-nohash\n'; return 0; }
	printf '\036relay-hashes\n'
	$rh "$1" || return 1
	printf '\036relay-sizes\n'
	wc -c "$1" || return 1
	printf '\036relay-done\n'
}
