#!/usr/bin/env bash
# Install the JavaScript and Python plugin toolchains from the package registries and build
# every JS and Python plugin into a component:
#   plugins/js/*/       -> plugins/js/dist/<name>.wasm      (componentize-js, via sdk/js)
#   plugins/python/*/   -> plugins/python/dist/<name>.wasm  (componentize-py, via sdk/python)
#
#   bash sdk/build-polyglot.sh [--jobs N] [--force] [--only NAME]
#
# Idempotent and fast when nothing changed: the toolchains are reinstalled only when
# sdk/js/package-lock.json or sdk/python/requirements.lock change, and each plugin is rebuilt
# only when its inputs change. Needs node >= 18 with npm, and python3 >= 3.11 with venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

# --- JavaScript: @bytecodealliance/componentize-js + jco, pinned by sdk/js/package-lock.json
js_want="$(digest sdk/js/package.json sdk/js/package-lock.json)"
if [ "$(cat sdk/js/node_modules/.capgate-lock 2>/dev/null)" != "$js_want" ]; then
  echo "polyglot: installing the JavaScript toolchain (npm ci)"
  t0=$(date +%s)
  (cd sdk/js && npm ci --no-audit --no-fund --loglevel=error)
  echo "$js_want" > sdk/js/node_modules/.capgate-lock
  echo "polyglot: JavaScript toolchain installed in $(( $(date +%s) - t0 )) s"
fi

# --- Python: componentize-py, pinned with hashes by sdk/python/requirements.lock
py_want="$(digest sdk/python/requirements.lock)"
venv=sdk/python/.venv
if [ "$(cat "$venv/.capgate-lock" 2>/dev/null)" != "$py_want" ]; then
  echo "polyglot: installing the Python toolchain (pip, venv $venv)"
  t0=$(date +%s)
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r sdk/python/requirements.lock
  echo "$py_want" > "$venv/.capgate-lock"
  echo "polyglot: Python toolchain installed in $(( $(date +%s) - t0 )) s"
fi

echo "polyglot: node $(node --version), componentize-js $(node -p 'require("./sdk/js/node_modules/@bytecodealliance/componentize-js/package.json").version'), jco $(node -p 'require("./sdk/js/node_modules/@bytecodealliance/jco/package.json").version'), $("$venv/bin/componentize-py" --version)"
exec python3 sdk/build_polyglot.py "$@"
