#!/usr/bin/env bash
# TCP_ZEROCOPY_RECEIVE beside the kernel's own reference, tools/testing/selftests/net/tcp_mmap.c
# (Eric Dumazet), on loopback, IPv6 (::1) and IPv4 (127.0.0.1): both receivers map with a 512 KiB
# window and SO_RCVLOWAT, both senders write 512 KiB chunks with MSG_ZEROCOPY, MSS 4108 (a page
# of payload per segment), the system's default congestion control for both. tcp_mmap sends
# 32 GiB; netsteer runs SECONDS. Tools alternate, client on CPU 0, server on CPU 1. Prints
# Gbit/s, % mapped, retransmits (nstat, both tools) and the receiver thread's CPU µs per MiB.
# The tool that runs first alternates from pair to pair. From 6 pairs up, the throughput ratio
# carries its median's 95 % interval and a verdict (met, parity, missed; benches/pairs.py).
# tcp_mmap is not packaged: build it from a kernel tree first, e.g.
#   gcc -O2 -o /tmp/tcp_mmap tools/testing/selftests/net/tcp_mmap.c -lpthread
# Usage: TCP_MMAP=/tmp/tcp_mmap benches/zerocopy.sh [SECONDS (10)] [PAIRS (3)]
set -euo pipefail
secs=${1:-10}
pairs=${2:-3}
cd "$(dirname "$0")/.."
tm=${TCP_MMAP:?set TCP_MMAP to a built tcp_mmap}
for t in nstat python3; do command -v $t >/dev/null || { echo "$t missing: apt-get install -y iproute2 python3"; exit 2; }; done
cargo build --release -q -p netsteer
bin=$PWD/target/release/netsteer
bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap stop_bg EXIT
results=$(mktemp)
retrans() { nstat | awk '$1 == "TcpRetransSegs" {print $2}' | grep . || echo 0; }
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), cc $(sysctl -n net.ipv4.tcp_congestion_control)"
run_tcp_mmap() { # FAMILY ADDR
  local fam=$1 addr=$2 port out rt
  port=$((20000 + RANDOM % 20000))
  out=$(mktemp)
  taskset -c 1 stdbuf -oL "$tm" -s -z -M 4108 -$fam -p $port > "$out" 2>&1 &
  bg=$!
  sleep 0.5
  nstat -n
  taskset -c 0 "$tm" -H $addr -z -M 4108 -$fam -p $port
  sleep 1
  rt=$(retrans)
  stop_bg
  # "received 32768 MB (100 % mmap'ed) in 14.4 s, 19.05 Gbit" / "... 207.6 usec per MB, ..."
  python3 - "$out" "$fam" "$rt" >> "$results" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"\((\S+) % mmap'ed\) in \S+ s, (\S+) Gbit", t)
c = re.search(r"(\S+) usec per MB", t)
print("tcp_mmap", sys.argv[2], float(m.group(2)), float(m.group(1)), sys.argv[3], float(c.group(1)))
PY
  rm -f "$out"
}
run_netsteer() { # FAMILY HOSTPORT-HOST
  local fam=$1 hp=$2 port line rt
  port=$((20000 + RANDOM % 20000))
  taskset -c 1 "$bin" bench tcp-stream server --listen "$hp:$port" >/dev/null 2>&1 &
  bg=$!
  sleep 0.4
  nstat -n
  line=$(taskset -c 0 "$bin" bench tcp-stream client "$hp:$port" --duration "$secs" --mss 4108 --zerocopy-send \
    --zerocopy-recv --write-size 524288 --json | grep '"type":"summary"')
  rt=$(retrans)
  stop_bg
  python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print("netsteer", sys.argv[2], s["bits_per_second"]/1e9, 100*s["rx_mapped_bytes"]/s["bytes"], sys.argv[3], s["cpu_us_per_mb"]["server"])' \
    "$line" "$fam" "$rt" >> "$results"
}
# The tool that goes first alternates by pair, so neither always runs on the other's leftovers.
for r in $(seq "$pairs"); do
  for fam in 6 4; do
    if [ $fam = 6 ]; then addr=::1; hp="[::1]"; else addr=127.0.0.1; hp=127.0.0.1; fi
    if [ $((r % 2)) = 1 ]; then
      run_tcp_mmap $fam $addr; run_netsteer $fam "$hp"
    else
      run_netsteer $fam "$hp"; run_tcp_mmap $fam $addr
    fi
  done
done
python3 - "$results" <<'PY'
import sys, statistics
sys.path.insert(0, "benches")
import pairs
rows = {}
for l in open(sys.argv[1]):
    tool, fam, g, mapped, rt, us = l.split()
    rows.setdefault(fam, {}).setdefault(tool, []).append((float(g), float(mapped), int(rt), float(us)))
mmm = pairs.mmm
print("\n| family | tool | Gbit/s | % mapped | retransmits | receiver µs/MiB | throughput ratio netsteer/tcp_mmap |")
print("|---|---|---|---|---|---|---|")
for fam, t in rows.items():
    ns, tm = t["netsteer"], t["tcp_mmap"]
    ratio = [a[0] / b[0] for a, b in zip(ns, tm)]
    at_least_1 = lambda x: x >= 1.0
    verdict = pairs.verdict(ratio, at_least_1)
    for name, v in (("netsteer", ns), ("tcp_mmap", tm)):
        print(f"| IPv{fam} | {name} | {mmm([x[0] for x in v])} | {mmm([x[1] for x in v], '{:.5f}')} | "
              f"{mmm([x[2] for x in v], '{:.0f}')} | {mmm([x[3] for x in v], '{:.0f}')} | "
              f"{pairs.cell(ratio, at_least_1) + ' ' + verdict if name == 'netsteer' else ''} |")
print("\nvalues: min/median/max over the pairs; ratio of back-to-back runs, (k/n) pairs at >= 1.00,")
print("[lo, hi] the median ratio's 95 % interval (from 6 pairs up), then the verdict: met, parity")
print("(the gap is within the pairs' noise) or missed (benches/pairs.py).")
print("tcp_mmap prints % mapped with 6 significant digits (100 = at least 99.99995).")
PY
rm -f "$results"
