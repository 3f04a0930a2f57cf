# Shared by xtask/telemetry-cost.sh and xtask/build-cpu.sh (sourced, not run): one measured
# load run against a server, and the summary of two settings. The caller sets `work` (a
# scratch directory), `dir` (the example's directory), `port`, `xtask`, `connections`,
# `seconds`, `warmup`, and keeps `server_pid` in its cleanup.

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure NAME CAPGATE CONFIG: serve CONFIG with CAPGATE on core 0, load it from core 1,
# and append "NAME ok/s p50 p99 cpu-us/call" to $work/results (and print it). The server's
# CPU per call is utime+stime from /proc/PID/stat over the measured window.
measure() {
  local name=$1 bin=$2 cfg=$3
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

# summarize A B: per setting, the runs' ok/s (mean, median, range), p50s, p99s and CPU per
# call; then B against A by means and medians.
summarize() {
  python3 - "$work/results" "$1" "$2" <<'PY'
import statistics, sys
path, a, b = sys.argv[1:]
by = {}
for name, rate, p50, p99, us in (l.split() for l in open(path)):
    by.setdefault(name, []).append((float(rate), p50, p99, float(us)))
m, md = statistics.mean, statistics.median
for name in (a, b):
    v = by[name]
    rates = [x[0] for x in v]; cpu = [x[3] for x in v]
    print(f"{name}: runs {len(v)}, ok/s mean {m(rates):.0f} median {md(rates):.0f} "
          f"(min {min(rates):.0f} max {max(rates):.0f}), p50 {' '.join(x[1] for x in v)}, "
          f"p99 {' '.join(x[2] for x in v)}, cpu/call mean {m(cpu):.0f} us median {md(cpu):.0f} us")
A, B = by[a], by[b]
rate = lambda v: [x[0] for x in v]
cpu = lambda v: [x[3] for x in v]
print(f"{b} vs {a}: throughput {100*(m(rate(B))/m(rate(A))-1):+.1f} % by means, "
      f"{100*(md(rate(B))/md(rate(A))-1):+.1f} % by medians; "
      f"cpu/call {100*(m(cpu(B))/m(cpu(A))-1):+.1f} % by means")
PY
}
