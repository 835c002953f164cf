#!/usr/bin/env bash
# netsteer bench udp-echo beside sockperf ping-pong (the anchor), side by side in one run: the
# same 32-byte payload and CPU placement (client CPU 0 / server CPU 1, and both on CPU 0), in
# blocking and spin modes (sockperf --nonblocked), on loopback and across the veth link of
# `netsteer lab with` (benches/lib.sh). Each case runs REPEATS times, the two tools
# alternating; it prints p50/p99 for both and the netsteer/sockperf ratios (min/median/max over
# the repeats), and the CPU each side spends per round trip for both tools: the server process's
# CPU (/proc/PID/stat) over the client's run and the client's (getrusage), each divided by every
# round trip the client made, warm-up included (sockperf's "[Total Run]" count, netsteer's
# received + warmup_round_trips), with the ratios.
# Targets: p50 ratio <= 1.00 and p99 ratio <= 1.05; CPU per round trip ratio <= 1.00. From 6
# repeats up, each latency ratio carries its median's 95 % interval, and every cell gets a
# verdict: met, parity (within the pairs' noise) or missed (benches/pairs.py).
# Usage: [INTERFERE=N | INTERFERE_CPUS=0,1] benches/udp-echo.sh [SECONDS_PER_RUN (5)]
# [REPEATS (3)] (N unpinned busy loops, or one pinned to each listed CPU, run throughout as a
# background load; see benches/lib.sh). Needs root (namespaces),
# sockperf and python3: apt-get install -y sockperf iproute2 python3
set -euo pipefail
secs=${1:-5}
repeats=${2:-3}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
command -v sockperf >/dev/null || { echo "sockperf missing: apt-get install -y sockperf"; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs"; exit 2; }

# The background server's pid: stopped by pid, never by a name pattern that could match a
# user's own sockperf or netsteer.
bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap 'stop_bg; interference_stop' EXIT

results=$(mktemp)
cpufile=$(mktemp)
# run ENV PLACEMENT MODE TOOL -> appends "env placement mode tool p50_us p99_us round_trips
# server_ticks client_cpu_s client_wall_s" to $results
run() {
  local env=$1 place=$2 mode=$3 tool=$4 addr cns sns ccpu scpu port
  if [ "$env" = loopback ]; then addr=127.0.0.1; cns=(); sns=(); else addr=$server_addr; cns=(ip netns exec $nsa); sns=(ip netns exec $nsb); fi
  ccpu=0; if [ "$place" = cross ]; then scpu=1; else scpu=0; fi
  port=$((20000 + RANDOM % 20000))
  if [ "$tool" = sockperf ]; then
    local nb=(); [ "$mode" = spin ] && nb=(--nonblocked)
    "${sns[@]}" taskset -c $scpu sockperf sr -i $addr -p $port "${nb[@]}" >/dev/null 2>&1 &
    bg=$!
    sleep 0.5
    local out t0 t1
    t0=$(ticks $bg)
    out=$(cpuwrap "$cpufile" "${cns[@]}" taskset -c $ccpu sockperf pp -i $addr -p $port -m 32 -t "$secs" --full-rtt "${nb[@]}" 2>&1)
    t1=$(ticks $bg)
    stop_bg
    local p50 p99 rt
    p50=$(echo "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
    p99=$(echo "$out" | sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p')
    # "[Total Run] RunTime=3.001 sec; Warm up time=400 msec; SentMessages=...; ReceivedMessages=N"
    rt=$(echo "$out" | sed -n 's/.*Total Run.*ReceivedMessages=\([0-9]*\).*/\1/p' | head -1)
    echo "$env $place $mode sockperf $p50 $p99 $rt $(( t1 - t0 )) $(cat "$cpufile")" >> "$results"
  else
    local wait=block; [ "$mode" = spin ] && wait=spin
    # Rate limits off: the veth address is not loopback, and a benchmark must not be throttled.
    "${sns[@]}" "$bin" bench udp-echo server --listen $addr:$port --cpu $scpu --wait $wait \
      --max-pps-per-source 0 --max-pps 0 >/dev/null 2>&1 &
    bg=$!
    sleep 0.5
    local line t0 t1
    t0=$(ticks $bg)
    line=$(cpuwrap "$cpufile" "${cns[@]}" "$bin" bench udp-echo client $addr:$port --cpu $ccpu --wait $wait --size 32 \
      --warmup 0.5 --duration "$secs" --json | grep '"type":"summary"')
    t1=$(ticks $bg)
    stop_bg
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); l=d["latency_ns"]; print(sys.argv[2], l["p50"]/1000, l["p99"]/1000, d["received"] + d["warmup_round_trips"])' \
      "$line" "$env $place $mode netsteer" | tr '\n' ' ' >> "$results"
    echo "$(( t1 - t0 )) $(cat "$cpufile")" >> "$results"
  fi
}

interference_start
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "runs of ${secs}s, ${repeats} repeats per case, tools alternating"
for env in loopback veth; do
  for place in cross same; do
    for mode in block spin; do
      for r in $(seq "$repeats"); do
        run $env $place $mode netsteer
        run $env $place $mode sockperf
      done
    done
  done
done

python3 - "$results" <<'PY'
import sys, statistics
sys.path.insert(0, "benches")
import pairs
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
cases = {}
for env, place, mode, tool, p50, p99, rt, ticks, ccpu, cwall in rows:
    rt = max(int(rt), 1)
    # CPU µs per round trip over every round trip the client made.
    scpu = int(ticks) / 100 / rt * 1e6
    ccpu = float(ccpu) / rt * 1e6
    cases.setdefault((env, place, mode), {}).setdefault(tool, []).append((float(p50), float(p99), scpu, ccpu))
mmm = lambda v: pairs.mmm(v, "{:.3f}")
print()
print("| path | placement | mode | netsteer p50 µs | sockperf p50 µs | netsteer p99 µs | sockperf p99 µs | p50 ratio | p99 ratio | server CPU µs/rt netsteer / sockperf (ratio) | client CPU µs/rt netsteer / sockperf (ratio) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
at_most = lambda t: lambda x: x <= t
judge = pairs.Judge()
judged = judge.cell
for (env, place, mode), t in cases.items():
    ns, sp = t["netsteer"], t["sockperf"]
    # Ratios of runs done back to back (repeat i of each tool).
    r50 = [a[0] / b[0] for a, b in zip(ns, sp)]
    r99 = [a[1] / b[1] for a, b in zip(ns, sp)]
    # Two decimals (pairs.verdict rounds so): the histogram resolves 3 significant digits
    # (0.1 %), so 1.0004 is 1.00.
    pl = "client 0 / server 1" if place == "cross" else "both on 0"
    r50c = judged(r50, at_most(1.00), f"{env} {pl} {mode} p50")
    r99c = judged(r99, at_most(1.05), f"{env} {pl} {mode} p99")
    med = statistics.median
    side = {2: "server", 3: "client"}
    cpu = lambda i: (f"{med([x[i] for x in ns]):.2f} / {med([x[i] for x in sp]):.2f} "
                     f"({judged([a[i] / b[i] for a, b in zip(ns, sp)], at_most(1.00), f'{env} {pl} {mode} {side[i]} CPU per round trip')})")
    print(f"| {env} | {pl} | {mode} | {mmm([x[0] for x in ns])} | {mmm([x[0] for x in sp])} | "
          f"{mmm([x[1] for x in ns])} | {mmm([x[1] for x in sp])} | {r50c} | {r99c} | {cpu(2)} | {cpu(3)} |")
print()
print("values: min/median/max over the repeats; ratio = netsteer / sockperf of back-to-back runs,")
print("(k/n) pairs that met the target by themselves, [lo, hi] the median ratio's 95 % interval")
print("(from 6 pairs up; benches/pairs.py)")
judge.report("p50 <= 1.00, p99 <= 1.05, each side's CPU per round trip <= 1.00")
PY
rm -f "$results" "$cpufile"
