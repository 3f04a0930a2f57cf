#!/usr/bin/env bash
# Install the MCP client toolchains the MCP tests drive capgate with:
#   tests/mcp/.venv         the official MCP Python SDK (PyPI `mcp`), from requirements.lock
#   tests/mcp/node_modules  the official TypeScript MCP SDK (npm `@modelcontextprotocol/sdk`),
#                           from package-lock.json
#
#   examples/mcp-upstream/node_modules  the MCP server the mcp-upstream example puts behind
#                           capgate (npm `@modelcontextprotocol/server-everything`)
#
#   bash tests/mcp/setup.sh [python|node|example|all]     (default: all)
#
# Idempotent and quick when nothing changed (each install is redone only when its lock file
# changes), and safe to run from several test processes at once (flock). Needs python3 >= 3.11
# with venv, and node >= 18 with npm.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"
what="${1:-all}"

digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

exec 9>"$DIR/.setup.lock"
flock 9

if [ "$what" = all ] || [ "$what" = python ]; then
  want="$(digest requirements.lock)"
  if [ "$(cat .venv/.capgate-lock 2>/dev/null)" != "$want" ]; then
    echo "mcp-setup: installing the MCP Python SDK (venv tests/mcp/.venv)" >&2
    rm -rf .venv
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
    echo "$want" > .venv/.capgate-lock
  fi
fi

if [ "$what" = all ] || [ "$what" = node ]; then
  want="$(digest package.json package-lock.json)"
  if [ "$(cat node_modules/.capgate-lock 2>/dev/null)" != "$want" ]; then
    echo "mcp-setup: installing the TypeScript MCP SDK (npm ci in tests/mcp)" >&2
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" > node_modules/.capgate-lock
  fi
fi

if [ "$what" = all ] || [ "$what" = example ]; then
  example="$DIR/../../examples/mcp-upstream"
  want="$(digest "$example/package.json" "$example/package-lock.json")"
  if [ "$(cat "$example/node_modules/.capgate-lock" 2>/dev/null)" != "$want" ]; then
    echo "mcp-setup: installing the mcp-upstream example's MCP server (npm ci in examples/mcp-upstream)" >&2
    (cd "$example" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" > "$example/node_modules/.capgate-lock"
  fi
fi
