#!/usr/bin/env bash
# Three configuration reloads under load (issue 18, point 4): `cargo xtask load` drives a
# release `capgate serve` for SECONDS_OF_LOAD (default 30) while the file is reloaded three times
# through `POST /admin/reload` — a lower refundLimit maximum, an added capability
# (messages.draft), and a broken file — and prints what each reload answered, what a probe
# call saw after it, and the load's own report (which fails on any non-2xx answer,
# unexpected outcome or transport error).
#
#   cargo xtask build-plugins && cargo xtask example-config --load
#   cargo build --release -p capgate -p xtask
#   xtask/reload-under-load.sh            # SECONDS_OF_LOAD=30 PORT=18080 CONNECTIONS=16
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
capgate=$target/release/capgate
xtask=$target/release/xtask
seconds=${SECONDS_OF_LOAD:-30}
port=${PORT:-18080}
connections=${CONNECTIONS:-16}
base=http://127.0.0.1:$port
load_config=$root/examples/customer-support/capgate.load.toml
for f in "$capgate" "$xtask" "$load_config"; do
  [ -e "$f" ] || { echo "missing $f (see the commands at the top of $0)" >&2; exit 2; }
done

work=$(mktemp -d)
# Written beside the example so its relative plugin and schema paths hold.
config=$root/examples/customer-support/capgate.reload-drill.toml
ops_key=ops-reload-key
ops_hash=$(printf %s "$ops_key" | sha256sum | cut -d' ' -f1)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -f "$config"
  rm -rf "$work"
}
trap cleanup EXIT

# variant REVISION MAX_AMOUNT DRAFT(yes|no) BROKEN(yes|no)
variant() {
  python3 - "$load_config" "$config" "$1" "$2" "$3" "$4" "$ops_hash" <<'PY'
import sys
src, dst, revision, max_amount, draft, broken, ops_hash = sys.argv[1:]
text = open(src).read()
text = text.replace('revision = "customer-support-2026-11"', f'revision = "{revision}"', 1)
text = text.replace("maxAmount = 500", f"maxAmount = {max_amount}", 1)
if draft == "no":
    marker = '[[capabilities]]\nid = "messages.draft"'
    start = text.index(marker)
    end = text.index("\n[", start + len(marker)) + 1
    text = text[:start] + text[end:]
if broken == "yes":
    text = text.replace('risk = "high"', 'risk = "catastrophic"', 1)
text += f'''
[gateway.admin]
reload = true

[[gateway.apiKeys]]
sha256 = "{ops_hash}"
namespace = "org_1"
roles = ["operator"]
actor = {{ id = "u_ops", kind = "user" }}
'''
open(dst, "w").write(text)
PY
}

reload() {
  echo "== reload $1 ($(date +%T))"
  curl -s -w '\nHTTP %{http_code}\n' -X POST -H "authorization: Bearer $ops_key" "$base/admin/reload"
}

probe_n=0
probe() {
  probe_n=$((probe_n + 1))
  curl -s -H 'authorization: Bearer dana-dev-key' -H 'content-type: application/json' \
    -d "${1/@ID@/probe_${probe_n}_$$}" "$base/agent/invoke" | python3 -c 'import json,sys; a=json.load(sys.stdin); print("   probe:", a.get("status"), (a.get("error") or {}).get("code") or "", (a.get("approval") or {}).get("reasons") or "")'
}

refund_300='{"capabilityId":"orders.refund","input":{"orderId":"ord_42","amount":300,"reason":"probe"},"invocationId":"@ID@"}'
draft='{"capabilityId":"messages.draft","input":{"customerId":"cus_1","body":"On its way."},"invocationId":"@ID@"}'

variant drill-1 500 no no
"$capgate" serve --config "$config" --store "sqlite://$work/drill.db" \
  --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
server_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/serve.out" 2>/dev/null && break
  sleep 0.2
done
grep -q "listening on" "$work/serve.out" || { cat "$work/serve.err" >&2; exit 1; }
echo "== serving $base (pid $server_pid), load for ${seconds}s"
probe "$refund_300"

"$xtask" load --url "$base/agent" --seconds "$seconds" --warmup 0 \
  --connections "$connections" --pid "$server_pid" >"$work/load.out" 2>&1 &
load_pid=$!
step=$(( seconds / 4 ))

sleep "$step"
variant drill-2 100 no no
reload "1: refundLimit maxAmount 500 -> 100"
probe "$refund_300"

sleep "$step"
variant drill-3 100 yes no
reload "2: messages.draft added"
probe "$draft"

sleep "$step"
variant drill-4 100 yes yes
reload "3: a broken file (risk = \"catastrophic\")"
probe "$refund_300"

status=0
wait "$load_pid" || status=$?
echo "== load (exit $status)"
cat "$work/load.out"
echo "== server log (warnings and errors)"
cat "$work/serve.err"
exit "$status"
