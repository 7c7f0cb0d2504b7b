# transfer-ssh pull, step 2: the tar stream. Args: <guest path> file|tree.
p=$1 k=$2
if [ -L "$p" ]; then printf 'relay-ssh: %s\n' "guest path $p is a symbolic link; pulls never follow links" >&2; exit 4; fi
if [ "$k" = file ]; then
	q=${p%/*}
	[ -n "$q" ] || q=/
	cd -- "$q" || exit 5
	exec tar -c -f - "./${p##*/}"
fi
cd -- "$p" || exit 5
exec tar -c -f - .
