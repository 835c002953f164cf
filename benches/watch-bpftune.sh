#!/usr/bin/env bash
# `netsteer watch --apply` beside Debian 13's bpftune (the anchor) on the same backlog flood in
# the same QEMU guests (crates/cli/tests/vm_watch.rs, `beside_bpftune`): the two take turns,
# the order alternating each round, the sysctls reset before each turn. bpftune and the
# trixie libraries it links come from the lab's private apt list (never installed on the host)
# and run in the guest from a root of their own. Per turn it prints how soon after the first
# drop netdev_max_backlog changed, the drops during the flood, the settings each ends with,
# and what each leaves after SIGKILL (netsteer's also after `tune rollback`).
# Usage: benches/watch-bpftune.sh [ROUNDS] (default 2); RATE (each of the four streams' iperf3
# -b, default unbounded) from the environment. Root, QEMU and busybox-static.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2} cargo test -p netsteer --test vm_watch beside_bpftune -- --ignored --nocapture 2>&1 |
  awk '/^(measured|bpftune [0-9])|^test result/ {print} /panicked/ {print; n = 3; next} n > 0 {print; n--}'
