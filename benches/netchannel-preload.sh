#!/usr/bin/env bash
# Unmodified Redis on netchannel in-process (`netsteer netchannel run`, the preload library)
# against plain TCP, side by side in one run, between the two hosts of `netsteer lab with`
# (benches/lib.sh): redis-benchmark in the client namespace, redis-server in the server
# namespace, GET and SET of 4 KiB values, pipelining 1 and 16.
#   direct   plain TCP to a redis-server that is not preloaded
#   nc-N     redis-benchmark preloaded with N throughput channels to a preloaded redis-server
#            (N = 1, 2, 4); the programs' own threads read the channels (--receive app)
#   th-1     the same with one channel and a reader thread per channel (--receive thread),
#            the design before run-to-completion
# Modes are alternated within each pair (the order rotates pair by pair); the summary gives
# requests/s min/median/max over the pairs and the per-pair ratio against direct TCP.
# PIN=1 (default): redis-server on CPU 1, redis-benchmark on CPU 0 (a preloaded program's
# channel threads inherit its CPU); PIN=0: nothing pinned (channel work may take the other CPU).
# Usage: benches/netchannel-preload.sh [PAIRS (5)] [REQUESTS (100000)] [CLIENTS (50)]
#   MODES="direct nc-1" and PIPELINES=16 narrow a run (default: all modes, pipelining 1 and 16).
# Needs root, iproute2, redis-server, redis-tools, python3.
set -euo pipefail
pairs=${1:-5}
requests=${2:-100000}
clients=${3:-50}
pin=${PIN:-1}
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
cpu() { if [ "$pin" = 1 ]; then echo "taskset -c $1"; fi; }

redis=(redis-server --save '' --appendonly no --daemonize no --protected-mode no --bind $server_addr)
ip netns exec $nsb $(cpu 1) "${redis[@]}" --port 6379 >"$work/redis.log" 2>&1 &
pids+=($!)
ip netns exec $nsb $(cpu 1) "$bin" netchannel run --listen $server_addr:7700 --ports 6380 -- \
  "${redis[@]}" --port 6380 >"$work/redis-nc.log" 2>&1 &
pids+=($!)
ip netns exec $nsb $(cpu 1) "$bin" netchannel run --receive thread --listen $server_addr:7701 \
  --ports 6381 -- "${redis[@]}" --port 6381 >"$work/redis-th.log" 2>&1 &
pids+=($!)
for t in $(seq 1 30); do
  ip netns exec $nsa "$bin" netchannel run --peer $server_addr:7700 --ports 6380 -- \
    redis-cli -h $server_addr -p 6380 ping 2>/dev/null | grep -q PONG && break
  sleep 0.3
done
ip netns exec $nsa redis-cli -h $server_addr -p 6379 ping | grep -q PONG

run() { # mode pipeline → CSV lines "mode,P,test,rps,p99"
  local mode=$1 p=$2 target
  case $mode in
    direct) target=(redis-benchmark -h $server_addr -p 6379) ;;
    nc-*) target=("$bin" netchannel run --peer $server_addr:7700 --ports 6380 --channels ${mode#nc-}
                  --latency-channels 0 -- redis-benchmark -h $server_addr -p 6380) ;;
    th-*) target=("$bin" netchannel run --receive thread --peer $server_addr:7701 --ports 6381
                  --channels ${mode#th-} --latency-channels 0 -- redis-benchmark -h $server_addr -p 6381) ;;
  esac
  ip netns exec $nsa $(cpu 0) "${target[@]}" -t set,get -n $requests -d 4096 -P $p -c $clients --csv 2>/dev/null |
    awk -F'"?,"?' -v m=$mode -v p=$p 'NR > 1 { gsub(/"/, ""); print m "," p "," $1 "," $2 "," $7 }'
}

echo "clients: $clients; requests per test: $requests; pairs: $pairs; pinned: $pin"
read -ra modes <<<"${MODES:-direct nc-1 nc-2 nc-4 th-1}"
n=${#modes[@]}
for p in ${PIPELINES:-1 16}; do
  for pair in $(seq 1 $pairs); do
    for k in $(seq 0 $((n - 1))); do
      run ${modes[$(( (pair + k) % n ))]} $p | tee -a "$work/results.csv"
    done
  done
done
python3 - "$work/results.csv" <<'PY'
import sys, statistics as st
sys.path.insert(0, "benches")
import pairs as pr
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
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
# The goal (issue 38): one channel, preloaded ÷ direct ≥ 1.0; the median's 95 % interval and
# the verdict (benches/pairs.py; from 6 pairs up).
print("nc-1 ÷ direct, per pair, min/med/max (pairs ≥ 1) [median's 95 % interval]:")
judge = pr.Judge()
for (p, test, mode), v in sorted(data.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], kv[0][2])):
    direct = [x for x, _ in data.get((p, test, "direct"), [])]
    if mode != "nc-1" or len(direct) != len(v):
        continue
    r = [a / b for (a, _), b in zip(v, direct)]
    print(f"{p:>3} {test:<4} {judge.cell(r, lambda x: x >= 1.0, f'P{p} {test} nc-1 ÷ direct')}")
judge.report("one channel ÷ direct TCP ≥ 1.00")
PY
echo "preloaded redis-server's stderr:"
grep -v "^[0-9]*:[CM] " "$work/redis-nc.log" | head -20 || true
