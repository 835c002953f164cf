#!/usr/bin/env bash
# Unmodified Redis three ways, side by side in one run, between the two hosts of
# `netsteer lab with` (benches/lib.sh): redis-benchmark in the client namespace, redis-server in
# the server namespace, GET and SET of 4 KiB values, pipelining 1 and 16.
#   direct  plain TCP to redis-server
#   proxy   netsteer netchannel proxy client → CHANNELS channels → proxy server → redis-server
#   mptcp   mptcpize (Debian mptcpd) on both programs: one MPTCP connection per client with
#           CHANNELS subflows (CHANNELS-1 extra client addresses as `subflow` endpoints)
#   haproxy the proxy pair's anchor of its kind: two HAProxy instances in TCP mode on the same
#           path (client side 127.0.0.1:6382 → server side SERVER:7800 → redis-server), each with
#           HAProxy's default threads
# The four are alternated within each pair (the order rotates pair by pair); each prints
# requests/s and p99 per test (redis-benchmark --csv), and the summary gives min/median/max
# over the pairs and the per-pair ratio against direct TCP (and the proxy's against HAProxy's).
# redis-server is pinned to CPU 1 and redis-benchmark to CPU 0; the proxies are not pinned
# (on a 2-CPU machine they share both CPUs with the programs, as a sidecar would).
# Usage: benches/netchannel-proxy.sh [PAIRS (5)] [REQUESTS (100000)] [CHANNELS (2)] [CLIENTS (8)]
#   MODES="direct proxy haproxy" and PIPELINES=16 narrow a run (default: all four, P 1 and 16).
# Needs root, iproute2, redis-server, redis-tools, mptcpd, haproxy, python3.
set -euo pipefail
pairs=${1:-5}
requests=${2:-100000}
channels=${3:-2}
clients=${4:-8}
. "$(dirname "$0")/lib.sh"
in_lab --queues 2 -- "$@"
client_addr=$NETSTEER_LAB_CLIENT_ADDR
prefix=${client_addr%.*}
pids=()
work=$(mktemp -d)
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# MPTCP: the path manager of each namespace (the lab's, removed with it) opens one subflow
# per extra client address.
ip -n $nsa mptcp limits set subflow $channels add_addr_accepted $channels
ip -n $nsb mptcp limits set subflow $channels add_addr_accepted $channels
for i in $(seq 2 $channels); do
  extra=$prefix.$((100 + i))
  ip -n $nsa addr add $extra/24 dev $va
  ip -n $nsa mptcp endpoint add $extra dev $va subflow
done

redis=(redis-server --save '' --appendonly no --daemonize no --protected-mode no)
ip netns exec $nsb taskset -c 1 "${redis[@]}" --port 6379 --bind $server_addr 127.0.0.1 >"$work/redis.log" 2>&1 &
pids+=($!)
ip netns exec $nsb taskset -c 1 mptcpize run "${redis[@]}" --port 6381 --bind $server_addr >"$work/redis-mptcp.log" 2>&1 &
pids+=($!)
ip netns exec $nsb "$bin" netchannel proxy server --listen $server_addr:7700 \
  --backend 6379=127.0.0.1:6379 >"$work/server.out" 2>"$work/server.log" &
pids+=($!)
sleep 0.5
ip netns exec $nsa "$bin" netchannel proxy client --peer $server_addr:7700 \
  --route 127.0.0.1:6380=6379 --channels $channels --latency-channels 0 >"$work/client.out" 2>"$work/client.log" &
pids+=($!)
haproxy_cfg() { # bind target
  printf 'global\n  maxconn 4096\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n'
  printf 'listen redis\n  bind %s\n  server s1 %s\n' "$1" "$2"
}
haproxy_cfg $server_addr:7800 127.0.0.1:6379 > "$work/haproxy-server.cfg"
haproxy_cfg 127.0.0.1:6382 $server_addr:7800 > "$work/haproxy-client.cfg"
ip netns exec $nsb haproxy -db -f "$work/haproxy-server.cfg" >"$work/haproxy-server.log" 2>&1 &
pids+=($!)
ip netns exec $nsa haproxy -db -f "$work/haproxy-client.cfg" >"$work/haproxy-client.log" 2>&1 &
pids+=($!)
for t in 1 2 3 4 5 6 7 8 9 10; do
  ip netns exec $nsa redis-cli -h 127.0.0.1 -p 6380 ping >/dev/null 2>&1 &&
    ip netns exec $nsa redis-cli -h 127.0.0.1 -p 6382 ping >/dev/null 2>&1 && break
  sleep 0.3
done
ip netns exec $nsa redis-cli -h 127.0.0.1 -p 6380 ping | grep -q PONG
ip netns exec $nsa redis-cli -h 127.0.0.1 -p 6382 ping | grep -q PONG

run() { # mode pipeline → CSV lines "mode,P,test,rps,p99"
  local mode=$1 p=$2 target
  case $mode in
    direct) target=(redis-benchmark -h $server_addr -p 6379) ;;
    proxy) target=(redis-benchmark -h 127.0.0.1 -p 6380) ;;
    mptcp) target=(mptcpize run redis-benchmark -h $server_addr -p 6381) ;;
    haproxy) target=(redis-benchmark -h 127.0.0.1 -p 6382) ;;
  esac
  ip netns exec $nsa taskset -c 0 "${target[@]}" -t set,get -n $requests -d 4096 -P $p -c $clients --csv 2>/dev/null |
    awk -F'"?,"?' -v m=$mode -v p=$p 'NR > 1 { gsub(/"/, ""); print m "," p "," $1 "," $2 "," $7 }'
}

echo "channels: $channels; clients: $clients; requests per test: $requests; pairs: $pairs"
read -ra modes <<<"${MODES:-direct proxy mptcp haproxy}"
n=${#modes[@]}
for p in ${PIPELINES:-1 16}; do
  for pair in $(seq 1 $pairs); do
    for k in $(seq 0 $((n - 1))); do
      run ${modes[$(( (pair + k) % n ))]} $p | tee -a "$work/results.csv"
    done
  done
done
echo "MPTCP joins in the client namespace (subflows beyond the first):"
ip netns exec $nsa nstat -az MPTcpExtMPJoinSynAckRx MPTcpExtMPCapableSYNACKRX | tail -n +2

python3 - "$work/results.csv" "$pairs" <<'EOF'
import sys, statistics as st
sys.path.insert(0, "benches")
import pairs as pr
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
pairs = int(sys.argv[2])
data = {}
for mode, p, test, rps, p99 in rows:
    data.setdefault((p, test, mode), []).append((float(rps), float(p99)))
def mmm(v):
    return f"{min(v):.0f}/{st.median(v):.0f}/{max(v):.0f}"
print(f"{'P':>3} {'test':<4} {'mode':<7} {'requests/s min/med/max':>26} {'p99 ms med':>10} {'rps ÷ direct (per pair) min/med/max':>36}")
for (p, test, mode), v in sorted(data.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], kv[0][2])):
    rps = [x for x, _ in v]
    p99 = [y for _, y in v]
    direct = [x for x, _ in data.get((p, test, "direct"), [])]
    ratio = ""
    if mode != "direct" and len(direct) == len(rps):
        r = [a / b for a, b in zip(rps, direct)]
        ratio = f"{min(r):.2f}/{st.median(r):.2f}/{max(r):.2f}"
    print(f"{p:>3} {test:<4} {mode:<7} {mmm(rps):>26} {st.median(p99):>10.3f} {ratio:>36}")
print("proxy ÷ haproxy, requests/s per pair, min/med/max (pairs ≥ 1) [median's 95 % interval]:")
judge = pr.Judge()
for (p, test, mode), v in sorted(data.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], kv[0][2])):
    if mode != "proxy":
        continue
    h = [x for x, _ in data.get((p, test, "haproxy"), [])]
    r = [a / b for (a, _), b in zip(v, h)]
    if r:
        print(f"{p:>3} {test:<4} {judge.cell(r, lambda x: x >= 1.0, f'P{p} {test} proxy ÷ haproxy')}")
judge.report("proxy pair ÷ HAProxy pair ≥ 1.00")
EOF
echo "proxy logs (channel events, failures):"
cat "$work/client.log" "$work/server.log"
