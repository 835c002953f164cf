#!/usr/bin/env bash
# The VM lab's noise floor (`netsteer lab noise`, docs/lab.md): RUNS identical runs of the UDP
# echo round trip (COUNT a run, server and its NIC's vectors on the guest's CPU 1, client on
# CPU 0) in each of three rigs, the rigs taking turns ROUNDS times (the order rotating each
# round), so the host's load falls on all three alike:
#   pair     two guests on a tap bridge, the host's clock (the lab's usual form);
#   twin     one guest, both NICs on one QEMU hub, the host's clock;
#   twin-vt  the same guest in virtual time (-icount shift=0,sleep=off, one TCG thread).
# Per rig and round: p99 min/median/max over the runs and the spread (max − min, % of the
# median), and the server CPU's hard IRQs, NET_RX runs and context switches per request.
# BUSY=1 runs a busy loop on host CPU 1 throughout (the machine a user shares).
# Usage: benches/lab-noise.sh [ROUNDS (1)] [RUNS (10)] [COUNT (2000)] [NIC (igb)] [KERNEL (7.3)]
# Needs root, QEMU 8+ and busybox-static (the README's set-up).
set -euo pipefail
rounds=${1:-1}
runs=${2:-10}
count=${3:-2000}
nic=${4:-igb}
kernel=${5:-7.3}
bin=${NETSTEER:-$(dirname "$0")/../target/release/netsteer}
out=$(mktemp -d /tmp/netsteer-noise.XXXXXX)
busy=
stop_busy() { [ -n "$busy" ] && { kill "$busy" 2>/dev/null || true; wait "$busy" 2>/dev/null || true; }; busy=; }
trap stop_busy EXIT
if [ "${BUSY:-0}" = 1 ]; then
  taskset -c 1 sh -c 'while :; do :; done' &
  busy=$!
fi
echo "results in $out (busy loop on CPU 1: ${BUSY:-0})"
rigs=(pair twin twin-vt)
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < 3; k++)); do
    rig=${rigs[(r + k) % 3]}
    case $rig in
      pair) args=(--rig pair) ;;
      twin) args=(--rig twin) ;;
      twin-vt) args=(--rig twin --virtual-time) ;;
    esac
    echo "round $((r + 1)): $rig"
    "$bin" lab noise "${args[@]}" --nic "$nic" --kernel "$kernel" --runs "$runs" --count "$count" --json \
      | tee -a "$out/$rig.jsonl" > /dev/null
  done
done
python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"| rig | round | p99 min/median/max | spread | hard IRQs / NET_RX / switches per request (medians) |")
print("|---|---|---|---|---|")
for rig in ("pair", "twin", "twin-vt"):
    p = os.path.join(d, rig + ".jsonl")
    if not os.path.exists(p):
        continue
    for i, l in enumerate(open(p)):
        m = json.loads(l)
        unit = "virtual ns" if m["virtual_time"] is not None else "ns"
        s = m["p99_ns"]
        print(f"| {rig} | {i + 1} | {s['min']:.0f} / {s['median']:.0f} / {s['max']:.0f} {unit} | "
              f"{m['noise_pct']:.1f} % | {m['hard_irqs_per_request']['median']:.2f} / "
              f"{m['net_rx_per_request']['median']:.2f} / {m['switches_per_request']['median']:.2f} |")
PY
