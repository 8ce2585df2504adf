#!/usr/bin/env bash
# End-to-end tests of the MCP server with the TypeScript SDK clients (see e2e.mjs).
#
#   DSH_MCP_SERVER="<server command>" crates/dsh-mcp/tests/e2e-ts/run.sh [test-name ...]
#
# Installs package-lock.json's packages with `npm ci` when node_modules is missing. Exit
# codes: 0 all passed, 1 a test failed, 77 skipped (the reason is printed); under CI=true a
# missing node or npm is a failure, never a skip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

skip() {
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL dsh-mcp TypeScript e2e: $* (CI=true: nothing may skip)"
        exit 1
    fi
    echo "SKIP dsh-mcp TypeScript e2e: $*"
    exit 77
}

[ -n "${DSH_MCP_SERVER:-}" ] || skip "DSH_MCP_SERVER is not set"
command -v node >/dev/null 2>&1 || skip "node is not installed"
if [ ! -d "$here/node_modules/@modelcontextprotocol/client" ] || [ ! -d "$here/node_modules/@modelcontextprotocol/sdk" ]; then
    command -v npm >/dev/null 2>&1 || skip "npm is not installed"
    (
        # One installer at a time when several test runs share the directory.
        flock 9
        cd "$here"
        [ -d node_modules/@modelcontextprotocol/client ] || npm ci --no-audit --no-fund >&2
    ) 9>"$here/.npm-ci.lock" || skip "npm ci failed in $here"
fi
exec node "$here/e2e.mjs" "$@"
