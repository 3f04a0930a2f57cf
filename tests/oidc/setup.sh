#!/usr/bin/env bash
# Install the OpenID Provider the OIDC tests start on loopback (tests/oidc/provider.mjs):
#   tests/oidc/node_modules  npm `oidc-provider` (a certified OpenID Connect implementation),
#                            from package-lock.json
#
#   bash tests/oidc/setup.sh
#
# Idempotent and quick when nothing changed (the install is redone only when package.json
# or package-lock.json changes), and safe to run from several test processes at once
# (flock). Needs node >= 20.19 with npm (oidc-provider 9 prefers node 22 and says so on
# stderr; 20 works).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"

digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

exec 9>"$DIR/.setup.lock"
flock 9

want="$(digest package.json package-lock.json)"
if [ "$(cat node_modules/.capgate-lock 2>/dev/null)" != "$want" ]; then
  echo "oidc-setup: installing oidc-provider (npm ci in tests/oidc)" >&2
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > node_modules/.capgate-lock
fi
