#!/usr/bin/env bash
# `netsteer watch --apply` against bursts a bigger backlog absorbs, in QEMU guests
# (crates/cli/tests/vm_watch.rs, `bursts_a_bigger_backlog_absorbs`): RPS sends every rx queue to
# CPU 1, a nice -20 loop takes CPU 1 for BUSY of every BUSY + IDLE seconds, four iperf3 UDP
# streams at RATE each. Each round floods once without a watcher and once with one; per flood
# it prints the drops in the first 10 s after the first drop and after, the last drop's time,
# the settings it ends with and the watcher's advice, changes and guard verdicts.
# IDLE=0 makes the loop steady: the suite's flood held to RATE, against the same flood without a
# watcher (`RATE=2M IDLE=0 benches/watch-burst.sh 3`).
# Usage: benches/watch-burst.sh [ROUNDS] (default 3); RATE, BUSY, IDLE from the environment.
# Root, QEMU and busybox-static.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} cargo test -p netsteer --test vm_watch bursts_a_bigger_backlog_absorbs -- --ignored --nocapture 2>&1 |
  awk '/^(measured|bursts)|^test result/ {print} /panicked/ {print; n = 3; next} n > 0 {print; n--}'
