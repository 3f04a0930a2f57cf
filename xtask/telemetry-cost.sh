#!/usr/bin/env bash
# What tracing and metrics cost under load (issue 16): the gateway load benchmark on the
# example's load deployment, "off" (no [telemetry.metrics], no [telemetry.traces]) against
# "on" (metrics at their own listener + traces at samplingRatio 0.1 exported to a live
# OTLP/HTTP receiver on loopback), alternated A B B A for ROUNDS rounds in one sitting.
# Server on core 0 (`taskset -c 0`), generator and receiver on core 1. For each run it
# prints the load report's ok/s, p50 and p99 and the server's CPU per call (utime+stime from
# /proc/PID/stat over the measured window), then a summary with means and medians.
#
#   cargo xtask build-plugins && cargo xtask example-config --load
#   cargo build --release -p capgate -p xtask
#   xtask/telemetry-cost.sh          # ROUNDS=3 SECONDS_OF_LOAD=20 WARMUP=3 CONNECTIONS=16 PORT=18090
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
capgate=$target/release/capgate
xtask=$target/release/xtask
rounds=${ROUNDS:-3}
seconds=${SECONDS_OF_LOAD:-20}
warmup=${WARMUP:-3}
connections=${CONNECTIONS:-16}
port=${PORT:-18090}
otlp_port=${OTLP_PORT:-4399}
load_config=$root/examples/customer-support/capgate.load.toml
for f in "$capgate" "$xtask" "$load_config"; do
  [ -e "$f" ] || { echo "missing $f (see the commands at the top of $0)" >&2; exit 2; }
done

dir=$root/examples/customer-support
work=$(mktemp -d)
server_pid=
sink_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null || true
  rm -f "$dir"/capgate.telemetry-*.toml "$dir"/capgate-telemetry-*.db*
  rm -rf "$work"
}
trap cleanup EXIT

# The two configurations, beside the example so its relative paths hold.
python3 - "$load_config" "$dir" "$port" "$otlp_port" <<'PY'
import re, sys
src, d, port, otlp = sys.argv[1:]
text = open(src).read()
text = re.sub(r'listen = "127\.0\.0\.1:\d+"', f'listen = "127.0.0.1:{port}"', text, count=1)
text = text.replace('capgate-load.db', 'capgate-telemetry-@.db')
start = text.index("[telemetry.metrics]")
end = text.find("\n[", start + 1)
metrics = text[start:] if end < 0 else text[start:end + 1]
off = text.replace(metrics, "")
on = text.replace('listen = "127.0.0.1:9464"', 'listen = "127.0.0.1:19464"')
on += f'\n[telemetry.traces]\nendpoint = "http://127.0.0.1:{otlp}"\nsamplingRatio = 0.1\n'
open(f"{d}/capgate.telemetry-off.toml", "w").write(off.replace("@", "off"))
open(f"{d}/capgate.telemetry-on.toml", "w").write(on.replace("@", "on"))
PY
grep -q '^\[telemetry.metrics\]' "$dir/capgate.telemetry-off.toml" && { echo "off still has metrics" >&2; exit 1; }

# A live OTLP/HTTP receiver: reads each export and answers an empty ExportTraceServiceResponse.
taskset -c 1 python3 - "$otlp_port" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
sink_pid=$!

. "$root/xtask/load-measure.sh"

run() { # NAME
  rm -f "$dir"/capgate-telemetry-"$1".db*
  measure "$1" "$capgate" "$dir/capgate.telemetry-$1.toml"
}

echo "name ok/s p50 p99 cpu-us/call"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run off; run on; run on; run off; else run on; run off; run off; run on; fi
done
summarize off on
