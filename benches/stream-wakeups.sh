#!/usr/bin/env bash
# Where a multi-flow tcp-stream's CPU goes, netsteer beside iperf3: for each run, the rate, how
# busy each CPU was (/proc/stat: user, system, irq, softirq) and how often each side's threads
# slept (voluntary context switches of all the process's threads, /proc/PID/task/*/status),
# per MiB moved. Every sleep ends in a wake-up, and on a veth path the wake-ups of the
# receiver's threads are paid by the sending CPU, in the softirq that queues the data
# (tcp_data_queue -> sock_def_readable): that is the cost this script prices.
#
# Client on CPU 0, server on CPU 1, 128 KiB writes, runs of 4 s measured over their middle
# 2 s, iperf3 and netsteer alternating (the first tool of each pair alternates too). ENGINES
# lists netsteer's --engine values to run beside each iperf3 run (default: auto).
# Usage: [ENGINES="auto poll"] benches/stream-wakeups.sh [FLOWS (4)] [REPEATS (5)] [veth|loopback]
# Needs root (namespaces), iperf3 and python3: apt-get install -y iperf3 iproute2 python3
set -euo pipefail
flows=${1:-4}
repeats=${2:-5}
path=${3:-veth}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install -y iperf3"; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs"; exit 2; }
case $path in veth | loopback) ;; *) echo "path: veth or loopback, not $path"; exit 2 ;; esac
engines=${ENGINES:-auto}

bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap stop_bg EXIT
results=$(mktemp)

if [ "$path" = veth ]; then
  addr=$server_addr; cns=(ip netns exec "$nsa"); sns=(ip netns exec "$nsb"); dev=$va
else
  addr=127.0.0.1; cns=(); sns=(); dev=lo
fi
tx_bytes() { "${cns[@]}" cat /sys/class/net/$dev/statistics/tx_bytes; }
# Busy ticks of one CPU: user, nice, system, irq, softirq.
busy() { awk -v c="cpu$1" '$1 == c {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# Sleeps so far of all the threads of a process.
sleeps() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {n += $2} END {print n + 0}'; }

# run TOOL ENGINE PAIR -> "tool pair gbit cpu0_pct cpu1_pct server_sleeps_per_mib
# client_sleeps_per_mib"
run() {
  local tool=$1 engine=$2 pair=$3 port c label
  port=$((20000 + RANDOM % 20000))
  if [ "$tool" = iperf3 ]; then
    "${sns[@]}" taskset -c 1 iperf3 -s -p $port -B $addr >/dev/null 2>&1 &
    bg=$!
    sleep 0.4
    "${cns[@]}" taskset -c 0 iperf3 -c $addr -p $port -t 4 -P "$flows" -l 131072 >/dev/null &
    c=$!
    label=iperf3
  else
    "${sns[@]}" taskset -c 1 "$bin" bench tcp-stream server --listen $addr:$port >/dev/null 2>&1 &
    bg=$!
    sleep 0.4
    "${cns[@]}" taskset -c 0 "$bin" bench tcp-stream client $addr:$port --duration 4 \
      --flows "$flows" --write-size 131072 --engine "$engine" >/dev/null &
    c=$!
    label=netsteer-$engine
  fi
  sleep 1
  local b0 z0 o0 s0 k0 b1 z1 o1 s1 k1
  b0=$(tx_bytes); z0=$(busy 0); o0=$(busy 1); s0=$(sleeps $bg); k0=$(sleeps $c)
  sleep 2
  b1=$(tx_bytes); z1=$(busy 0); o1=$(busy 1); s1=$(sleeps $bg); k1=$(sleeps $c)
  wait $c || { echo "$label client failed"; exit 2; }
  stop_bg
  python3 -c 'import sys
b0, b1, z0, z1, o0, o1, s0, s1, k0, k1 = map(int, sys.argv[2:])
mib = max(b1 - b0, 1) / 2**20
print(*sys.argv[1].split(), f"{mib * 8 / 1024 / 2:.2f}", (z1 - z0) / 2, (o1 - o0) / 2,
      f"{(s1 - s0) / mib:.3f}", f"{(k1 - k0) / mib:.3f}")' \
    "$label $pair" "$b0" "$b1" "$z0" "$z1" "$o0" "$o1" "$s0" "$s1" "$k0" "$k1" >> "$results"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "$path, $flows flows of 128 KiB writes, client CPU 0 / server CPU 1, $repeats pairs per engine"
for r in $(seq "$repeats"); do
  for e in $engines; do
    if [ $((r % 2)) -eq 1 ]; then
      run iperf3 - "$r-$e"; run netsteer "$e" "$r-$e"
    else
      run netsteer "$e" "$r-$e"; run iperf3 - "$r-$e"
    fi
  done
done

python3 - "$results" <<'PY'
import sys
sys.path.insert(0, "benches")
import pairs
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by, runs = {}, {}
for tool, pair, *v in rows:
    by.setdefault(tool, []).append([float(x) for x in v])
    runs[(tool, pair)] = float(v[0])
mmm = pairs.mmm
print()
print("| tool | Gbit/s | CPU 0 busy % | CPU 1 busy % | server sleeps per MiB | client sleeps per MiB |")
print("|---|---|---|---|---|---|")
for tool, v in by.items():
    col = lambda i, f="{:.1f}": mmm([x[i] for x in v], f)
    print(f"| {tool} | {col(0)} | {col(1, '{:.0f}')} | {col(2, '{:.0f}')} | {col(3, '{:.2f}')} | {col(4, '{:.2f}')} |")
print()
# Pairs: each netsteer run against the iperf3 run just before or after it.
for tool in by:
    if tool == "iperf3":
        continue
    ratios = [g / runs[("iperf3", p)] for (t, p), g in runs.items()
              if t == tool and runs.get(("iperf3", p))]
    print(f"{tool} / iperf3 rate: {pairs.cell(ratios, lambda x: x >= 1.00)}")
print("values: min/median/max over the runs; ratio cells: min/median/max (k/n pairs at >= 1.00)")
print("[95 % interval of the median ratio, from 6 pairs up]; sleeps: voluntary context switches")
PY
rm -f "$results"
