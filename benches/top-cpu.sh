#!/usr/bin/env bash
# CPU cost of `netsteer top --interval 1` over 60 s, beside sysstat's `mpstat -P ALL 1` (the
# anchor) run at the same time for the same 60 s. Both are pinned to the same CPU.
# Target: netsteer < 1% of one CPU. Usage: benches/top-cpu.sh [SECONDS] (default 60).
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/.."
cargo build --release -q -p netsteer
bin=target/release/netsteer
cpu=$(( $(nproc) - 1 ))
measure() { # prints "user+sys seconds" of the command's process tree
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
wall = time.monotonic() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{r.ru_utime + r.ru_stime:.3f} {wall:.1f}")
PY
}
measure taskset -c "$cpu" "$bin" top --interval 1 --count "$secs" --plain > /tmp/netsteer-top-cpu.$$ &
have_mpstat=0
if command -v mpstat >/dev/null; then
  have_mpstat=1
  measure taskset -c "$cpu" mpstat -P ALL 1 "$secs" > /tmp/mpstat-cpu.$$ &
fi
wait
read -r ns_cpu ns_wall < /tmp/netsteer-top-cpu.$$
ns_pct=$(python3 -c "print(f'{100*$ns_cpu/$ns_wall:.3f}')")
echo "netsteer top --interval 1 for ${ns_wall}s: ${ns_cpu}s CPU = ${ns_pct}% of one CPU (target < 1%)"
if [ $have_mpstat = 1 ]; then
  read -r mp_cpu mp_wall < /tmp/mpstat-cpu.$$
  mp_pct=$(python3 -c "print(f'{100*$mp_cpu/$mp_wall:.3f}')")
  echo "mpstat -P ALL 1       for ${mp_wall}s: ${mp_cpu}s CPU = ${mp_pct}% of one CPU"
  python3 -c "print(f'ratio netsteer/mpstat: {($ns_cpu or 1e-9)/max($mp_cpu,1e-3):.2f}')"
else
  echo "mpstat not installed (apt-get install sysstat) - anchor not run"
fi
rm -f /tmp/netsteer-top-cpu.$$ /tmp/mpstat-cpu.$$
