#!/usr/bin/env bash
# `netsteer tune search` on a real driver: two QEMU guests with Intel igb (82576; Debian's 6.1
# kernel, or KERNEL=6.12), the search run in guest a (the client's machine) over every knob its
# igb offers there without --knob (each rx queue's RPS mask, GRO, rx-usecs coalescing, the
# device-wide NAPI deferral, threaded NAPI, and busy_read/busy_poll: a guest is a whole machine,
# so the global sysctls exist), against an echo server or memcached (one thread, CPU 1) in
# guest b, at a fixed RATE. Cost is guest a's busy CPU per request with the client's own CPU
# counted (busy polling spends it there). The goal is GOAL_FACTOR (0.9) times the baseline's
# p99 (the median of 3 runs after a discarded one). Each configuration found is set against
# netsteer's latency and balanced profiles and tuned's network-latency in the same alternated
# runs. Under TCG (no KVM here): compare configurations with each other, not with bare metal.
# VIRTUAL_TIME=SHIFT runs both ends in one guest instead, in virtual time (the twin: docs/lab.md):
# the client's side is a network namespace there, so the global sysctls (busy_read, busy_poll)
# are not its to search, and the cost counts both ends' CPUs, which share the guest.
# Usage: benches/tune-search-vm.sh [SECONDS_PER_RUN (3)] [RATE (300)] [BUDGET (12)] [CASES (udp-echo,memcached)]
# Needs root, QEMU with igb, busybox-static, memcached (.ci/deps installs them). Runs the
# release build of the ignored benchmark `bench_search_on_igb` in crates/cli/tests/vm_search.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/netsteer-search-vm.XXXXXX)
echo "results in $out"
SECS=${1:-3} RATE=${2:-300} BUDGET=${3:-12} CASES=${4:-udp-echo,memcached} NETSTEER_BENCH_OUT=$out \
  cargo test --release -q -p netsteer --test vm_search -- --ignored --nocapture bench_search_on_igb
IFS=, read -ra cases <<< "${4:-udp-echo,memcached}"
for c in "${cases[@]}"; do
  echo "== $c"
  python3 benches/search_summary.py "$out/$c.json"
done
