#!/bin/sh
# Runs test.mjs: MCP Tasks in both generations with @modelcontextprotocol/ext-tasks over
# @modelcontextprotocol/client (docs/mcp.md, Tasks).
#   sh run.sh /path/to/mcp-relay
# Installs the locked dependencies with `npm ci` when node_modules is missing. machine-local
# guests need a relay running as root until a relay without root has them (issue 21).
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$RELAY_BINARY}
if [ -z "$binary" ]; then
	echo "usage: sh run.sh /path/to/mcp-relay" >&2
	exit 2
fi
if ! command -v node >/dev/null 2>&1; then
	echo "FAIL node is not installed: the task test needs Node.js 20 or newer (Debian: apt-get install nodejs npm)" >&2
	exit 1
fi
if [ ! -f "$here/node_modules/@modelcontextprotocol/ext-tasks/package.json" ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "FAIL npm is not installed: it is needed once to install $here/node_modules (npm ci)" >&2
		exit 1
	fi
	echo "installing the locked clients with npm ci in $here" >&2
	if ! (cd "$here" && npm ci --no-audit --no-fund >&2); then
		echo "FAIL npm ci failed in $here: the npm registry must be reachable once (see package-lock.json)" >&2
		exit 1
	fi
fi
exec node "$here/test.mjs" "$binary"
