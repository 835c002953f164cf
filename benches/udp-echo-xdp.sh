#!/usr/bin/env bash
# AF_XDP on both ends against the kernel socket path, both spinning, on the veth pair of
# `netsteer lab with` (benches/lib.sh): client on CPU 0, server on CPU 1, 32-byte datagrams,
# the two paths alternated run by run (the order flips every repeat), REPEATS runs each.
#   kernel   bench udp-echo server/client --wait spin (veth GRO and UDP GRO forwarding on, the
#            ladder's fastest kernel rung)
#   xdp      bench udp-echo server/client --xdp (an XDP program on each veth end, copy mode)
# Prints min/median/max of p50 and p99 per path and the per-pair ratios xdp/kernel.
# Goal (issue 20): xdp p50 <= 0.75 x kernel p50 in the same run.
# Usage: benches/udp-echo-xdp.sh [SECONDS (5)] [REPEATS (5)]. Needs root, ethtool, python3.
set -euo pipefail
secs=${1:-5}
repeats=${2:-5}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
command -v ethtool >/dev/null || { echo "ethtool missing: apt-get install -y ethtool"; exit 2; }
A=(ip netns exec $nsa); B=(ip netns exec $nsb)
"${A[@]}" ethtool -K $va gro on rx-udp-gro-forwarding on >/dev/null
"${B[@]}" ethtool -K $vb gro on rx-udp-gro-forwarding on >/dev/null
bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap stop_bg EXIT
out=$(mktemp)
one() { # PATH REPEAT
  local path=$1 port=$((30000 + RANDOM % 20000)) srv=() cli=()
  [ "$path" = xdp ] && { srv=(--xdp "$vb"); cli=(--xdp "$va"); }
  "${B[@]}" "$bin" bench udp-echo server --listen $server_addr:$port --cpu 1 --wait spin \
    --max-pps-per-source 0 --max-pps 0 "${srv[@]}" --json >/dev/null 2>&1 &
  bg=$!
  sleep 0.5
  local line
  line=$("${A[@]}" "$bin" bench udp-echo client $server_addr:$port --cpu 0 --wait spin "${cli[@]}" \
    --size 32 --warmup 0.5 --duration "$secs" --json | grep '"type":"summary"')
  stop_bg
  echo "$path|$2|$line" >> "$out"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r); $secs s per run, $repeats repeats"
for r in $(seq "$repeats"); do
  if [ $((r % 2)) = 1 ]; then one kernel $r; one xdp $r; else one xdp $r; one kernel $r; fi
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    path, rep, js = line.rstrip("\n").split("|", 2)
    runs.setdefault(path, {})[rep] = json.loads(js)
def mm(xs): return f"{min(xs)/1000:.2f}/{statistics.median(xs)/1000:.2f}/{max(xs)/1000:.2f}"
print("| path | p50 µs | p99 µs | round trips/s (median) | lost |")
print("|---|---|---|---|---|")
for path in ("kernel", "xdp"):
    rs = list(runs[path].values())
    print(f"| {path} | {mm([r['latency_ns']['p50'] for r in rs])} | {mm([r['latency_ns']['p99'] for r in rs])} | "
          f"{statistics.median([r['pps'] for r in rs]):.0f} | {sum(r['lost'] for r in rs)} |")
reps = sorted(set(runs["kernel"]) & set(runs["xdp"]), key=int)
for q in ("p50", "p99"):
    ratios = [runs["xdp"][k]["latency_ns"][q] / runs["kernel"][k]["latency_ns"][q] for k in reps]
    print(f"xdp/kernel {q} per pair: min/median/max {min(ratios):.2f}/{statistics.median(ratios):.2f}/{max(ratios):.2f}")
x = next(iter(runs["xdp"].values())).get("xdp") or {}
print(f"xdp path: attach {x.get('attach')}, bind {x.get('bind')}")
print("values: min/median/max over the repeats")
PY
rm -f "$out"
