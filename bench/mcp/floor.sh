#!/bin/sh
# bench/mcp/floor.sh — how fast bench_mcp.py itself can go with mcp-relay's answers: records the
# relay's answers, then runs the driver against floor.c (replies with those bytes, no work)
# alternating with the relay.
#
# Then runs the floor against the Node anchor, twice: with mcp-relay's answers, and with the
# anchor's own relay_status answer (211 bytes) in their place. The first ratio is the most any
# server that gives mcp-relay's answers can reach against Node with this driver.
#
# Usage: bench/mcp/floor.sh MCP_RELAY_BINARY [runs]        (default 5 runs)
set -eu
BINARY=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
RUNS=${2:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/relay-bench-floor-XXXXXX)
trap 'rm -rf "$WORK"' EXIT INT TERM
mkdir -m 700 "$WORK/state" "$WORK/project" "$WORK/answers"
export MCP_RELAY_STATE_DIR="$WORK/state" MCP_RELAY_PROJECT="$WORK/project" TMPDIR="$WORK"
${CC:-cc} -O2 -o "$WORK/floor" "$HERE/floor.c"
record() {
	printf '%s\n' "$2" | "$BINARY" 2>/dev/null >"$WORK/answers/$1"
}
record initialize.json '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench_mcp","version":"1"}}}'
record tools_list.json '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
record status.json '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_status","arguments":{}}}'
record invalid.json '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_script","arguments":{"session_id":"ses_0123456789abcdef","runtime":"cobol","source":"echo hi"}}}'
echo "relay_status answer: $(wc -c <"$WORK/answers/status.json") bytes"
cd "$HERE/node-anchor"
python3 bench_mcp.py --repeat "$RUNS" --vs "$WORK/floor $WORK/answers" "$BINARY" 2>/dev/null | tail -1 |
	python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
for k in ["pipe_calls_per_s", "call_p50_ms", "init_ms"]:
    print("%-18s mcp-relay %10s   floor %10s   ratio %s" % (k, d["summary"][k]["median"], d["summary_b"][k]["median"],
          d["ratio_median_a_over_b"].get(k)))'

# The floor against Node: with mcp-relay's answers, and with the anchor's own relay_status answer.
command -v node >/dev/null 2>&1 || { echo "node is not installed: the floor against Node is skipped" >&2; exit 0; }
[ -d node_modules/@modelcontextprotocol/sdk ] || npm ci --no-audit --no-fund >&2
mkdir "$WORK/answers-node"
cp "$WORK/answers/"*.json "$WORK/answers-node/"
{ printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench_mcp","version":"1"}}}' \
	'{"jsonrpc":"2.0","method":"notifications/initialized"}' \
	'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"relay_status","arguments":{}}}'
  sleep 2; } | node server.mjs 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("id") == 2:
        print(json.dumps({"jsonrpc": "2.0", "id": 1, "result": m["result"]}, separators=(",", ":")))' \
	>"$WORK/answers-node/status.json"
echo "the anchor's relay_status answer: $(wc -c <"$WORK/answers-node/status.json") bytes"
printf '#!/bin/sh\nexec "%s" "%s"\n' "$WORK/floor" "$WORK/answers" >"$WORK/floor-relay"
printf '#!/bin/sh\nexec "%s" "%s"\n' "$WORK/floor" "$WORK/answers-node" >"$WORK/floor-node"
chmod +x "$WORK/floor-relay" "$WORK/floor-node"
for which in relay node; do
	python3 bench_mcp.py --repeat "$RUNS" --vs 'node server.mjs' "$WORK/floor-$which" 2>/dev/null | tail -1 |
		WHICH=$which python3 -c '
import json, os, sys
d = json.loads(sys.stdin.read())
k = "pipe_calls_per_s"
print("floor with %-6s answers %10s   Node %10s   ratio %s" % (os.environ["WHICH"] == "relay" and "relay" or "Node\x27s",
      d["summary"][k]["median"], d["summary_b"][k]["median"], d["ratio_median_a_over_b"].get(k)))'
done
