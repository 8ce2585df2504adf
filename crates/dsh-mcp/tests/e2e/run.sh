#!/usr/bin/env bash
# End-to-end tests of the MCP server with an independent client: the Python `mcp` package.
#
#   DSH_MCP_SERVER="<server command>" crates/dsh-mcp/tests/e2e/run.sh [test-file.py ...]
#
# The server command is split like a shell word list (e.g. "dsh-bash mcp" or the path of the
# mcp_stdio example). Python comes from the active virtualenv when it has `mcp` (CI installs
# requirements.txt into one); otherwise a virtualenv is made at $MCP_VENV (default
# target/mcp-venv) and `mcp>=2,<3` is installed into it. Exit codes: 0 all passed,
# 1 a test failed, 77 skipped (the reason is printed); under CI=true a missing python3 or `mcp`
# package is a failure, never a skip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"

skip() {
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL dsh-mcp e2e: $* (CI=true: nothing may skip)"
        exit 1
    fi
    echo "SKIP dsh-mcp e2e: $*"
    exit 77
}

[ -n "${DSH_MCP_SERVER:-}" ] || skip "DSH_MCP_SERVER is not set"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"

python=python3
if ! "$python" -c 'import mcp, mcp.client.stdio' >/dev/null 2>&1; then
    venv="${MCP_VENV:-$root/target/mcp-venv}"
    mkdir -p "$(dirname "$venv")" 2>/dev/null || skip "cannot create $(dirname "$venv") for the virtualenv"
    (
        # One installer at a time when several test runs share the virtualenv.
        flock 9
        if ! "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
            python3 -m venv "$venv" >/dev/null 2>&1 || exit 3
            "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2 || exit 4
        fi
    ) 9>"$(dirname "$venv")/.mcp-venv.lock" || skip "could not make a virtualenv with the mcp package at $venv (python3 -m venv / pip install 'mcp>=2,<3' failed)"
    python="$venv/bin/python"
fi
"$python" -c 'import mcp' >/dev/null 2>&1 || skip "the mcp package is not importable"

files=("$@")
if [ "${#files[@]}" -eq 0 ]; then
    files=("$here"/test_*.py)
fi
status=0
for file in "${files[@]}"; do
    echo "== $(basename "$file")"
    "$python" "$file" || status=1
done
exit "$status"
