#!/usr/bin/env bash
# Seed 000's ladder reproduced on the veth link of `netsteer lab with` (benches/lib.sh):
# client in one (CPU 0), server in the other (CPU 1), 32-byte datagrams, with
# --timestamp so each rung shows where the microseconds go (rx delivery = kernel RX stamp ->
# application, seed 000's `packet=`; tx send = send call -> kernel TX stamp).
#   1 block                 blocking receives, veth GRO off (no NAPI)
#   2 busy-poll 50          SO_BUSY_POLL 50 µs both sides; GRO and UDP GRO forwarding on, so
#                           the packets reach veth's NAPI and carry its id
#   3 spin                  non-blocking receive loops (seed 000's --polling)
#   4 spin, rx on app CPU   RPS steers the client's echoes to its own CPU 0 (the bad placement)
#   5 spin, rx away         RPS steers them to CPU 1, away from the client (seed 000's advice)
#   6 epoll                 non-blocking sockets, sleep in epoll_wait (event-driven servers)
#   7 epoll-busy 50         epoll_wait busy-polls per context (EPIOCSPARAMS, 6.9+), prefer-busy-poll
#   8 epoll-busy + suspend  the server also suspends its NAPI's IRQs (--irq-suspend 20 ms, 6.13+)
#   9 AF_XDP both ends      kernel bypass: an XDP program on each veth end redirects the echo
#                           traffic into AF_XDP sockets (copy mode on veth), both ends spinning on
#                           their rings (no socket timestamps on this path: its split is empty)
# Each rung also reports the server's CPU time per echo (its threads' user + system time),
# and, with RATE set, a paced client (RATE round trips/s) shows what each mode costs the server
# at a fixed load: spin burns its CPU whatever the load, the sleeping modes do not.
# Usage: RATE=1000 benches/udp-echo-ladder.sh ... for the paced variant.
# Usage: benches/udp-echo-ladder.sh [SECONDS (5)] [REPEATS (3)]. Needs root, ethtool, python3.
set -euo pipefail
secs=${1:-5}
repeats=${2:-3}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
command -v ethtool >/dev/null || { echo "ethtool missing: apt-get install -y ethtool"; exit 2; }
bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap stop_bg EXIT
A=(ip netns exec $nsa); B=(ip netns exec $nsb)
# GRO gives veth a NAPI; a local socket's UDP reaches it only with UDP GRO forwarding too
# (veth_skb_is_eligible_for_gro(): TSO is on by default on the sender).
gro() {
  "${A[@]}" ethtool -K $va gro "$1" rx-udp-gro-forwarding "$1" >/dev/null
  "${B[@]}" ethtool -K $vb gro "$1" rx-udp-gro-forwarding "$1" >/dev/null
}
rps() { "${A[@]}" sh -c "echo $1 > /sys/class/net/$va/queues/rx-0/rps_cpus"; }
out=$(mktemp)
srv_out=$(mktemp)
rate=(); [ -n "${RATE:-}" ] && rate=(--rate "$RATE")
stamp=(--timestamp)
rung() { # NAME WAIT [EXTRA FLAGS FOR BOTH SIDES] [-- EXTRA SERVER FLAGS]
  local name=$1 wait=$2 port=$((30000 + RANDOM % 20000)); shift 2
  local both=() srv=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do both+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; srv=("$@"); }
  # The server prints its summary (with its CPU time) when stopped with SIGTERM.
  "${B[@]}" "$bin" bench udp-echo server --listen $server_addr:$port --cpu 1 --wait "$wait" --busy-poll 50 \
    "${both[@]}" "${srv[@]}" --max-pps-per-source 0 --max-pps 0 --json >"$srv_out" 2>/dev/null &
  bg=$!
  sleep 0.5
  local line
  line=$("${A[@]}" "$bin" bench udp-echo client $server_addr:$port --cpu 0 --wait "$wait" --busy-poll 50 \
    "${both[@]}" "${rate[@]}" "${stamp[@]}" --size 32 --warmup 0.5 --duration "$secs" --json | grep '"type":"summary"')
  stop_bg
  echo "$name|$line|$(grep '"type":"summary"' "$srv_out" || echo '{}')" >> "$out"
}
rung_xdp() { # NAME: AF_XDP on both ends, spinning
  local name=$1 port=$((30000 + RANDOM % 20000))
  "${B[@]}" "$bin" bench udp-echo server --listen $server_addr:$port --cpu 1 --xdp "$vb" --json >"$srv_out" 2>/dev/null &
  bg=$!
  sleep 0.5
  local line
  line=$("${A[@]}" "$bin" bench udp-echo client $server_addr:$port --cpu 0 --wait spin --xdp "$va" \
    "${rate[@]}" --size 32 --warmup 0.5 --duration "$secs" --json | grep '"type":"summary"')
  stop_bg
  echo "$name|$line|$(grep '"type":"summary"' "$srv_out" || echo '{}')" >> "$out"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
for r in $(seq "$repeats"); do
  gro off; rps 0
  rung "1 block (GRO off)" block
  gro on
  rung "2 busy-poll 50 (GRO on)" busy-poll
  rung "3 spin" spin
  rps 1
  rung "4 spin, echoes processed on the client's CPU 0" spin
  rps 2
  rung "5 spin, echoes processed on CPU 1 (away)" spin
  rps 0
  rung "6 epoll" epoll
  rung "7 epoll-busy 50, prefer-busy-poll" epoll-busy --prefer-busy-poll
  rung "8 epoll-busy 50 + IRQ suspension 20 ms" epoll-busy --prefer-busy-poll -- --irq-suspend 20000000 --dev "$vb"
  # Each end names its own interface: the client's flag goes through `both`, the server's after --.
  stamp=()
  rung_xdp "9 AF_XDP both ends (copy mode)"
  stamp=(--timestamp)
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, js, srv = line.rstrip("\n").split("|", 2)
    r = json.loads(js)
    s = json.loads(srv)
    r["server_cpu_us_per_echo"] = s["cpu_us"] / s["echoed"] if s.get("echoed") else None
    r["server_cpu_pct"] = 100 * s["cpu_us"] / 1e6 / s["duration_s"] if s.get("duration_s") else None
    rows.setdefault(name, []).append(r)
def us(v): return f"{v/1000:.2f}"
def med(xs): return statistics.median(xs)
print()
print("| rung | p50 µs | p99 µs | rx delivery p50 µs | tx send p50 µs | round trips/s | server CPU µs/echo | server CPU % | echoes processed on CPU | napi id |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name, runs in rows.items():
    l = [r["latency_ns"] for r in runs]
    rx = [r["rx_delivery_ns"]["p50"] for r in runs if r["rx_delivery_ns"]]
    tx = [r["tx_send_ns"]["p50"] for r in runs if r["tx_send_ns"]]
    mm = lambda xs: f"{us(min(xs))}/{us(med(xs))}/{us(max(xs))}" if xs else "-"
    cpus = sorted({c for r in runs for c in r["incoming_cpus"]})
    napi = sorted({r["napi_id"] for r in runs if r["napi_id"] is not None})
    cpu = [r["server_cpu_us_per_echo"] for r in runs if r["server_cpu_us_per_echo"] is not None]
    pct = [r["server_cpu_pct"] for r in runs if r["server_cpu_pct"] is not None]
    f2 = lambda xs: f"{min(xs):.2f}/{med(xs):.2f}/{max(xs):.2f}" if xs else "-"
    f0 = lambda xs: f"{min(xs):.0f}/{med(xs):.0f}/{max(xs):.0f}" if xs else "-"
    print(f"| {name} | {mm([x['p50'] for x in l])} | {mm([x['p99'] for x in l])} | {mm(rx)} | {mm(tx)} | "
          f"{med([r['pps'] for r in runs]):.0f} | {f2(cpu)} | {f0(pct)} | {','.join(map(str, cpus))} | {','.join(map(str, napi))} |")
print()
print("values: min/median/max over the repeats")
PY
rm -f "$out" "$srv_out"
