#!/usr/bin/env bash
# netsteer bench netchannel (experiments E1-E4 of seed 004) on loopback and across a veth pair
# between the two hosts of `netsteer lab with` (benches/lib.sh). Every point runs beside plain TCP in
# the same process and run (the baseline is the kernel's own TCP, same writes, same threads);
# each point is repeated and reported as min/median/max.
# On the veth path RPS/RFS steer each channel's receive processing to the CPU of the thread
# that reads it (the reference's user-space stand-in for aRFS).
# Usage: [SUBFLOWS=2] benches/netchannel.sh [SECONDS_PER_POINT (3)] [REPEATS (3)] [EXPERIMENTS (E1,E2,E3,E4,recovery)]
# Needs root and iproute2. Add --json to the netsteer lines for JSON Lines.
set -euo pipefail
secs=${1:-3}
repeats=${2:-3}
exps=${3:-E1,E2,E3,E4,recovery}
. "$(dirname "$0")/lib.sh"
in_lab --queues 2 -- "$@"
mask=$(printf '%x' $(( (1 << $(nproc)) - 1 )))
for ns in $nsa $nsb; do
  ip netns exec $ns sh -c "for q in /sys/class/net/v*/queues/rx-*; do echo $mask > \$q/rps_cpus; echo 4096 > \$q/rps_flow_cnt; done"
done
# rps_sock_flow_entries is global; keep and restore it.
old_flow=$(cat /proc/sys/net/core/rps_sock_flow_entries)
trap 'echo $old_flow > /proc/sys/net/core/rps_sock_flow_entries' EXIT
echo 32768 > /proc/sys/net/core/rps_sock_flow_entries

args=(bench netchannel --duration "$secs" --repeat "$repeats" --experiment "$exps" --sender-cpu 0 --receiver-cpu 1)
echo "== loopback"
"$bin" "${args[@]}"
# The MPTCP row (veth only: E1/E2 beside one MPTCP connection with SUBFLOWS subflows, one per
# extra client address, the kernel's in-tree path manager of the lab's namespaces).
subflows=${SUBFLOWS:-2}
prefix=${NETSTEER_LAB_CLIENT_ADDR%.*}
ip -n $nsa mptcp limits set subflow $subflows add_addr_accepted $subflows
ip -n $nsb mptcp limits set subflow $subflows add_addr_accepted $subflows
for i in $(seq 2 $subflows); do
  ip -n $nsa addr add $prefix.$((100 + i))/24 dev $va
  ip -n $nsa mptcp endpoint add $prefix.$((100 + i)) dev $va subflow
done
echo "== veth (client in $nsa, server in $nsb; MPTCP with $subflows subflows)"
"$bin" "${args[@]}" --client-netns $nsa --server-netns $nsb --server-ip $server_addr --mptcp
