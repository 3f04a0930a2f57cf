#!/usr/bin/env bash
# Server CPU per governed invoke, two builds side by side (issue 38): the gateway load
# benchmark (`cargo xtask load`) on the example's load deployment (SQLite, journal + audit,
# fresh Wasm plugins), build A against build B alternated A B B A for ROUNDS rounds in one
# sitting. Server on core 0 (`taskset -c 0`), generator on core 1. For each run it prints
# the load report's ok/s, p50 and p99 and the server's CPU per call (utime+stime from
# /proc/PID/stat over the measured window), then means and medians per build.
#
#   cargo xtask build-plugins && cargo xtask example-config --load
#   cargo build --release -p capgate -p xtask     # build B; copy build A's capgate aside
#   xtask/build-cpu.sh /path/to/capgate-A target/release/capgate
#                      # ROUNDS=3 SECONDS_OF_LOAD=20 WARMUP=3 CONNECTIONS=16 PORT=18091
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
[ $# -eq 2 ] || { echo "usage: $0 CAPGATE_A CAPGATE_B" >&2; exit 2; }
a=$(realpath "$1")
b=$(realpath "$2")
xtask=$target/release/xtask
rounds=${ROUNDS:-3}
seconds=${SECONDS_OF_LOAD:-20}
warmup=${WARMUP:-3}
connections=${CONNECTIONS:-16}
port=${PORT:-18091}
load_config=$root/examples/customer-support/capgate.load.toml
for f in "$a" "$b" "$xtask" "$load_config"; do
  [ -e "$f" ] || { echo "missing $f (see the commands at the top of $0)" >&2; exit 2; }
done

dir=$root/examples/customer-support
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -f "$dir"/capgate.build-cpu.toml "$dir"/capgate-build-cpu.db*
  rm -rf "$work"
}
trap cleanup EXIT

# The configuration, beside the example so its relative paths hold: its own port and
# database, no metrics listener (both builds serve the same file).
python3 - "$load_config" "$dir" "$port" <<'PY'
import re, sys
src, d, port = sys.argv[1:]
text = open(src).read()
text = re.sub(r'listen = "127\.0\.0\.1:\d+"', f'listen = "127.0.0.1:{port}"', text, count=1)
text = text.replace('capgate-load.db', 'capgate-build-cpu.db')
start = text.find("[telemetry.metrics]")
if start >= 0:
    end = text.find("\n[", start + 1)
    text = text[:start] + ("" if end < 0 else text[end + 1:])
open(f"{d}/capgate.build-cpu.toml", "w").write(text)
PY

. "$root/xtask/load-measure.sh"

run() { # NAME BINARY
  rm -f "$dir"/capgate-build-cpu.db*
  measure "$1" "$2" "$dir/capgate.build-cpu.toml"
}

echo "build ok/s p50 p99 cpu-us/call"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run A "$a"; run B "$b"; run B "$b"; run A "$a"; else run B "$b"; run A "$a"; run A "$a"; run B "$b"; fi
done
summarize A B
