#!/usr/bin/env bash
# `netsteer tune search` on the veth link of `netsteer lab with` (benches/lib.sh), for two
# workloads at a fixed rate, each against netsteer's static profiles and tuned's
# network-latency (its network settings) in the same alternated runs:
#   udp-echo   server on CPU 1 in the server namespace, the client at RATE round trips/s;
#   memcached  one worker thread on CPU 1, `netsteer bench kv` at RATE requests/s (9 GETs : 1 SET).
# The search runs inside the server's namespace over what its veth end offers there: the rx
# queue's RPS mask, GRO, and the device-wide NAPI deferral (gro_flush_timeout,
# napi_defer_hard_irqs; with GRO on, veth has a NAPI they act on). The goal is GOAL_FACTOR (0.9)
# times the baseline's p99, the median of 3 runs after a discarded one: a configuration must be faster than the
# host as it is, and the cheapest such is wanted. Cost: busy CPU time of every CPU (/proc/stat)
# per request. A candidate run over ABORT_FACTOR (5) times the goal ends the search (a 3 s run's
# p99 at 5,000/s on this shared VM spikes to 3× now and then). Prints each search's report (and writes its HTML next to the plan) and a table.
# Usage: benches/tune-search.sh [SECONDS_PER_RUN (3)] [RATE (5000)] [BUDGET (12)] [CASES (udp-echo,memcached)].
# Needs root, memcached.
set -euo pipefail
secs=${1:-3}
rate=${2:-5000}
budget=${3:-12}
cases=${4:-udp-echo,memcached}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
out=$(mktemp -d /tmp/netsteer-search.XXXXXX)
server=
stop_server() { [ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }; server=; }
trap 'stop_server' EXIT
echo "results in $out"

p99_of() { # JSON Lines on stdin → the client summary's p99 (ns)
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("type")=="summary" and m.get("role")=="client": print(m["latency_ns"]["p99"])'
}

search() { # $1 case name, $2 workload command
  local name=$1 workload=$2 base=() i goal
  sh -c "$workload" > /dev/null # warm-up, discarded
  for i in 1 2 3; do base+=("$(sh -c "$workload" | p99_of)"); done
  goal=$(printf '%s\n' "${base[@]}" | sort -n | sed -n 2p)
  goal=$(python3 -c "print(round($goal * ${GOAL_FACTOR:-0.9} / 1000, 1))")
  echo "== $name: baseline p99 ${base[*]} ns; goal p99<=${goal}us"
  ip netns exec "$nsb" "$bin" tune search \
    --state-dir "$out/state-$name" \
    --goal "p99<=${goal}us" \
    --knob "/sys/class/net/$vb/queues/rx-0/rps_cpus=0,1,2,3" \
    --knob "nic/$vb/feature/rx-gro=0,1" \
    --knob "/sys/class/net/$vb/gro_flush_timeout=0,20000,100000" \
    --knob "/sys/class/net/$vb/napi_defer_hard_irqs=0,2,10" \
    --dev "$vb" \
    --workload "$workload" \
    --budget "$budget" --repeat 3 --confirm-repeat 5 --abort-factor "${ABORT_FACTOR:-5}" \
    --against latency,balanced,tuned-network-latency \
    --plan-out "$out/$name.plan.json" --report "$out/$name.html" \
    --json > "$out/$name.json" 2> "$out/$name.log" || true
  python3 "$(dirname "$0")/search_summary.py" "$out/$name.json"
}

for c in ${cases//,/ }; do
  case $c in
    udp-echo)
      ip netns exec "$nsb" "$bin" bench udp-echo server --listen "$server_addr:4321" --cpu 1 \
        --max-pps-per-source 0 --max-pps 0 > /dev/null 2>&1 &
      server=$!
      sleep 0.5
      search udp-echo "ip netns exec $nsa $bin bench udp-echo client $server_addr:4321 --cpu 0 --rate $rate --duration $secs --warmup 0.5 --json"
      stop_server
      ;;
    memcached)
      command -v memcached >/dev/null || { echo "memcached missing: apt-get install -y memcached"; exit 2; }
      ip netns exec "$nsb" taskset -c 1 memcached -u nobody -l "$server_addr" -p 11211 -t 1 -m 64 > /dev/null 2>&1 &
      server=$!
      sleep 0.5
      search memcached "ip netns exec $nsa taskset -c 0 $bin bench kv $server_addr:11211 --rate $rate --connections 4 --duration $secs --warmup 0.5 --json"
      stop_server
      ;;
    *) echo "unknown case $c (udp-echo, memcached)"; exit 2 ;;
  esac
done
