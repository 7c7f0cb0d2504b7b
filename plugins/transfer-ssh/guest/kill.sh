# transfer-ssh: kill process group <pgid> and confirm it is gone. Needs lib.sh.
case $1 in '' | *[!0-9]* | 0 | 1) relay_fail 2 "refusing to kill process group '$1'" ;; esac
kill -s KILL -- "-$1" 2>/dev/null || kill -KILL -- "-$1" 2>/dev/null
relay_sweep "$1"
