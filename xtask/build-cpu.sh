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

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # NAME BINARY
  local name=$1 bin=$2 cfg=$dir/capgate.build-cpu.toml
  rm -f "$dir"/capgate-build-cpu.db*
  (cd "$dir" && CAPGATE_LOG=error exec taskset -c 0 "$bin" serve --config "$cfg" >"$work/$name.server.log" 2>&1) &
  server_pid=$!
  for _ in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  taskset -c 1 "$xtask" load --url "http://127.0.0.1:$port/agent" --connections "$connections" \
    --seconds "$seconds" --warmup "$warmup" >"$work/load.out" 2>&1 &
  local load=$!
  sleep "$warmup"
  local c0; c0=$(cpu_ticks "$server_pid")
  wait "$load" || { cat "$work/load.out" "$work/$name.server.log" >&2; exit 1; }
  local c1; c1=$(cpu_ticks "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  local ok p50 p99
  ok=$(awk '/^load: [0-9]/{print $2}' "$work/load.out")
  read -r p50 p99 < <(awk '/^orders.refund|^invoke/{print $4, $6; exit}' "$work/load.out")
  local rate; rate=$(awk -v ok="$ok" -v s="$seconds" 'BEGIN{printf "%.0f", ok/s}')
  local us; us=$(awk -v c=$((c1 - c0)) -v t="$ticks" -v ok="$ok" 'BEGIN{printf "%.0f", c/t*1e6/ok}')
  echo "$name $rate $p50 $p99 $us" | tee -a "$work/results"
}

echo "build ok/s p50 p99 cpu-us/call"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run A "$a"; run B "$b"; run B "$b"; run A "$a"; else run B "$b"; run A "$a"; run A "$a"; run B "$b"; fi
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for name, rate, p50, p99, us in rows:
    by.setdefault(name, []).append((float(rate), p50, p99, float(us)))
for name in ("A", "B"):
    v = by.get(name, [])
    rates = [x[0] for x in v]; cpu = [x[3] for x in v]
    print(f"{name}: runs {len(v)}, ok/s mean {statistics.mean(rates):.0f} median {statistics.median(rates):.0f}, "
          f"p50 {' '.join(x[1] for x in v)}, p99 {' '.join(x[2] for x in v)}, "
          f"cpu/call mean {statistics.mean(cpu):.0f} us median {statistics.median(cpu):.0f} us")
A, B = by["A"], by["B"]
m = lambda xs: statistics.mean(xs)
print(f"B vs A: throughput {100*(m([x[0] for x in B])/m([x[0] for x in A])-1):+.1f} %, "
      f"cpu/call {100*(m([x[3] for x in B])/m([x[3] for x in A])-1):+.1f} % (by means)")
PY
