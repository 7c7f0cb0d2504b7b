# transfer-ssh: remove what a broken push left. Args: <token> <guest path>.
p=${2%/*}
[ -n "$p" ] || p=/
rm -rf -- "$p/.relay-push-$1" "$p/.relay-push-$1.hashes" "$p/.relay-push-$1.sizes" \
	"$p/.relay-push-$1.untarred"
