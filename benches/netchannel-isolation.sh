#!/usr/bin/env bash
# Isolation for unmodified applications (seed 004's Fig. 6(d); Caladan's colocation test is
# the anchor's shape): Redis GET p99 on a latency port while a bulk transfer runs on a
# throughput port of the same two hosts (`netsteer lab with`, benches/lib.sh), over plain TCP
# and over netchannel in-process (`netsteer netchannel run`: Redis's port is a latency port,
# the bulk server's a throughput port).
#   latency  redis-benchmark GET, 64-byte values, 8 clients, no pipelining
#   bulk     wrk (2 connections) fetching a 64 MiB file from nginx (sendfile), for as long as
#            the GET run lasts
# Per pair, for each transport: p99 alone, then p99 under the bulk load (order rotated pair by
# pair). The summary gives each transport's p99 under load ÷ p99 alone, min/median/max.
# Each preloaded server is its own process with its own channels (a netchannel endpoint lives
# in one process); the two transports share the link and both CPUs.
# Usage: benches/netchannel-isolation.sh [PAIRS (5)] [REQUESTS (50000)]
# Needs root, iproute2, redis-server, redis-tools, nginx-light, wrk, python3.
set -euo pipefail
pairs=${1:-5}
requests=${2:-50000}
. "$(dirname "$0")/lib.sh"
in_lab --queues 2 -- "$@"
pids=()
work=$(mktemp -d)
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/html"
head -c $((64 << 20)) /dev/urandom > "$work/html/bulk"
for port in 8080 8081; do
  cat > "$work/nginx-$port.conf" <<CONF
user root; worker_processes 1; daemon off; error_log stderr warn; pid $work/nginx-$port.pid;
events { worker_connections 64; }
http { access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path $work/b$port; proxy_temp_path $work/p$port; fastcgi_temp_path $work/f$port;
  uwsgi_temp_path $work/u$port; scgi_temp_path $work/s$port;
  server { listen $server_addr:$port; root $work/html; } }
CONF
done
redis=(redis-server --save '' --appendonly no --daemonize no --protected-mode no --bind $server_addr)
ip netns exec $nsb "${redis[@]}" --port 6379 >"$work/redis.log" 2>&1 &
pids+=($!)
ip netns exec $nsb nginx -e stderr -p "$work" -c "$work/nginx-8080.conf" >"$work/nginx.log" 2>&1 &
pids+=($!)
ip netns exec $nsb "$bin" netchannel run --listen $server_addr:7700 --latency-ports 6380 -- \
  "${redis[@]}" --port 6380 >"$work/redis-nc.log" 2>&1 &
pids+=($!)
ip netns exec $nsb "$bin" netchannel run --listen $server_addr:7701 --ports 8081 -- \
  nginx -e stderr -p "$work" -c "$work/nginx-8081.conf" >"$work/nginx-nc.log" 2>&1 &
pids+=($!)
nc_redis=("$bin" netchannel run --peer $server_addr:7700 --latency-ports 6380 --)
nc_bulk=("$bin" netchannel run --peer $server_addr:7701 --ports 8081 --latency-channels 0 --)
for t in $(seq 1 30); do
  ip netns exec $nsa "${nc_redis[@]}" redis-cli -h $server_addr -p 6380 ping 2>/dev/null | grep -q PONG &&
    ip netns exec $nsa "${nc_bulk[@]}" wrk -t1 -c1 -d1s http://$server_addr:8081/bulk >/dev/null 2>&1 && break
  sleep 0.3
done

get_p99() { # mode → "rps p99"
  local t
  case $1 in
    tcp) t=(redis-benchmark -h $server_addr -p 6379) ;;
    nc) t=("${nc_redis[@]}" redis-benchmark -h $server_addr -p 6380) ;;
  esac
  ip netns exec $nsa "${t[@]}" -t get -n $requests -d 64 -c 8 -P 1 --csv 2>/dev/null |
    awk -F'"?,"?' 'NR > 1 { gsub(/"/, ""); print $2, $7 }'
}
run() { # mode load → CSV "mode,load,rps,p99,bulk_MBps"
  local mode=$1 load=$2 bulk_pid= out
  if [ "$load" = 1 ]; then
    case $mode in
      tcp) ip netns exec $nsa wrk -t1 -c2 -d120s http://$server_addr:8080/bulk >"$work/wrk.out" 2>&1 & ;;
      nc) ip netns exec $nsa "${nc_bulk[@]}" wrk -t1 -c2 -d120s http://$server_addr:8081/bulk >"$work/wrk.out" 2>&1 & ;;
    esac
    bulk_pid=$!
    sleep 1
  fi
  out=$(get_p99 $mode)
  local mbps=0
  if [ -n "$bulk_pid" ]; then
    kill -INT $bulk_pid 2>/dev/null || true
    wait $bulk_pid 2>/dev/null || true
    mbps=$(awk '/Transfer\/sec/ { v = $2; if (v ~ /GB/) { sub(/GB/, "", v); v *= 1024 } else { sub(/MB/, "", v) } print v }' "$work/wrk.out")
  fi
  echo "$mode,$load,${out% *},${out#* },${mbps:-0}"
}

echo "GET requests per run: $requests; pairs: $pairs"
cases=("tcp 0" "tcp 1" "nc 0" "nc 1")
for pair in $(seq 1 $pairs); do
  for k in 0 1 2 3; do
    run ${cases[$(( (pair + k) % 4 ))]} | tee -a "$work/results.csv"
  done
done
python3 - "$work/results.csv" <<'PY'
import sys, statistics as st
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
by = {}
for mode, load, rps, p99, mbps in rows:
    by.setdefault((mode, load), []).append((float(rps), float(p99), float(mbps)))
def mmm(v, f="{:.3f}"):
    return "/".join(f.format(x) for x in (min(v), st.median(v), max(v)))
print(f"{'mode':<5} {'GET p99 ms alone':>22} {'GET p99 ms under bulk':>24} {'ratio (per pair)':>20} {'bulk MB/s':>18}")
for mode in ("tcp", "nc"):
    alone = [p for _, p, _ in by[(mode, "0")]]
    load = [p for _, p, _ in by[(mode, "1")]]
    ratio = [b / a for a, b in zip(alone, load)]
    bulk = [m for _, _, m in by[(mode, "1")]]
    print(f"{mode:<5} {mmm(alone):>22} {mmm(load):>24} {mmm(ratio, '{:.2f}'):>20} {mmm(bulk, '{:.0f}'):>18}")
PY
