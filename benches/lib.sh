# Sourced first by every benchmark script that needs two hosts:
#   . "$(dirname "$0")/lib.sh"; in_lab [netsteer lab with FLAGS...] -- "$@"
# It builds netsteer (release) and runs the calling script again under `netsteer lab with`:
# the lab's client and server namespaces joined by a veth link, removed when the script ends,
# fails, or is interrupted (and by `netsteer lab clean` after a kill -9). Inside, it sets
#   bin             the netsteer binary
#   nsa nsb         the client's and the server's namespace
#   va vb           their ends of the link
#   server_addr     the server's address on the link
# No script keeps its own namespace set-up.
self=$(realpath "$0")
cd "$(dirname "$self")/.."
bin=$PWD/target/release/netsteer
in_lab() {
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  if [ -z "${NETSTEER_LAB_SERVER_NS:-}" ]; then
    cargo build --release -q -p netsteer -p netsteer-preload
    exec "$bin" lab with "${flags[@]}" -- "$self" "$@"
  fi
  nsa=$NETSTEER_LAB_CLIENT_NS; nsb=$NETSTEER_LAB_SERVER_NS
  va=$NETSTEER_LAB_CLIENT_DEV; vb=$NETSTEER_LAB_SERVER_DEV
  server_addr=$NETSTEER_LAB_SERVER_ADDR
}

# Interference mode: a background load, the same for every tool and case, so a tail that
# degrades under interference is measured, not anecdotal. INTERFERE=N: N busy loops, not pinned
# (the scheduler moves them, so a run may share its client's CPU, its server's, or each in
# turn). INTERFERE_CPUS=0,1: one busy loop pinned to each listed CPU, a placement that stays the
# same from run to run. They stop when the script ends (EXIT trap of the caller: call
# interference_stop).
interference_pids=()
interference_start() {
  local n=${INTERFERE:-0} i cpu
  if [ -n "${INTERFERE_CPUS:-}" ]; then
    for cpu in ${INTERFERE_CPUS//,/ }; do
      [[ $cpu =~ ^[0-9]+$ ]] && [ "$cpu" -lt "$(nproc)" ] || { echo "INTERFERE_CPUS: no CPU $cpu here"; exit 2; }
      taskset -c "$cpu" sh -c 'while :; do :; done' &
      interference_pids+=($!)
    done
    echo "interference: one busy loop pinned to each of CPUs $INTERFERE_CPUS (INTERFERE_CPUS=$INTERFERE_CPUS)"
    return 0
  fi
  [ "$n" -gt 0 ] 2>/dev/null || return 0
  for i in $(seq "$n"); do
    sh -c 'while :; do :; done' &
    interference_pids+=($!)
  done
  echo "interference: $n busy loop(s), not pinned (INTERFERE=$n)"
}
interference_stop() {
  [ ${#interference_pids[@]} -gt 0 ] && kill "${interference_pids[@]}" 2>/dev/null || true
  interference_pids=()
}

# CPU accounting, the same for netsteer and the anchors, so the scripts can price each run.
# cpuwrap FILE CMD...: runs CMD and writes "cpu_seconds wall_seconds" of it (and its children,
# getrusage) to FILE.
cpuwrap() {
  python3 -c 'import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run(sys.argv[2:])
w = time.monotonic() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime} {w}\n")
sys.exit(r.returncode)' "$@"
}
# A process's user + system ticks (USER_HZ = 100) so far.
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
# Softirq ticks of all CPUs so far (/proc/stat's "cpu" line): the packet work that no
# process is charged for (with IRQ time accounting on, as on Debian's kernels).
softirq_ticks() { awk '/^cpu /{print $8}' /proc/stat; }
