#!/usr/bin/env bash
# netsteer bench netchannel (experiments E1-E4 of seed 004) on loopback and across a veth pair
# between two namespaces this script creates and removes. Every point runs beside plain TCP in
# the same process and run (the baseline is the kernel's own TCP, same writes, same threads);
# each point is repeated and reported as min/median/max.
# On the veth path RPS/RFS steer each channel's receive processing to the CPU of the thread
# that reads it (the reference's user-space stand-in for aRFS).
# Usage: benches/netchannel.sh [SECONDS_PER_POINT (3)] [REPEATS (3)] [EXPERIMENTS (E1,E2,E3,E4)]
# Needs root and iproute2. Add --json to the netsteer lines for JSON Lines.
set -euo pipefail
secs=${1:-3}
repeats=${2:-3}
exps=${3:-E1,E2,E3,E4}
cd "$(dirname "$0")/.."
cargo build --release -q -p netsteer
bin=$PWD/target/release/netsteer
nsa=nsnc-a-$$; nsb=nsnc-b-$$
cleanup() {
  ip netns del $nsa 2>/dev/null || true
  ip netns del $nsb 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $nsa; ip netns add $nsb
ip -n $nsa link add va numtxqueues 2 numrxqueues 2 type veth peer name vb netns $nsb numtxqueues 2 numrxqueues 2
ip -n $nsa addr add 10.225.0.1/24 dev va; ip -n $nsb addr add 10.225.0.2/24 dev vb
ip -n $nsa link set lo up; ip -n $nsa link set va up
ip -n $nsb link set lo up; ip -n $nsb link set vb up
mask=$(printf '%x' $(( (1 << $(nproc)) - 1 )))
for ns in $nsa $nsb; do
  ip netns exec $ns sh -c "for q in /sys/class/net/v*/queues/rx-*; do echo $mask > \$q/rps_cpus; echo 4096 > \$q/rps_flow_cnt; done"
done
# rps_sock_flow_entries is global; keep and restore it.
old_flow=$(cat /proc/sys/net/core/rps_sock_flow_entries)
trap 'echo $old_flow > /proc/sys/net/core/rps_sock_flow_entries; cleanup' EXIT
echo 32768 > /proc/sys/net/core/rps_sock_flow_entries

args=(bench netchannel --duration "$secs" --repeat "$repeats" --experiment "$exps" --sender-cpu 0 --receiver-cpu 1)
echo "== loopback"
"$bin" "${args[@]}"
echo "== veth (client in $nsa, server in $nsb)"
"$bin" "${args[@]}" --client-netns $nsa --server-netns $nsb --server-ip 10.225.0.2
