#!/usr/bin/env bash
# What `netsteer trace` costs, beside the same runs without it, alternated pair by pair, on the
# veth link of `netsteer lab with` (benches/lib.sh), and the cross-check of its receive-path
# time against the echo bench's own kernel split:
# Three cases: plain (no trace), traced (`netsteer trace` as it runs by default: per-packet
# programs attached for 1 s of each 10 s interval), full (`--duty 100`, every packet, the
# kernel timing the programs for the cost line 10 % of the time, the default `--price`), bare
# (`--duty 100 --price 0`: never timed) and timed (`--duty 100 --price 100`: always timed).
#   - udp-echo round trip p50 (client CPU 0, server CPU 1, 32 B, blocking): traced ÷ untraced
#     (target <= 1.05);
#   - the machine's CPU per echo (busy time of every CPU from /proc/stat over the echo run,
#     softirq included, where the BPF programs run): traced ÷ untraced (<= 1.10);
#   - a UDP flood's received packets/s (iperf3 -u -b 0 -l 64, the receiver's count):
#     traced ÷ untraced (>= 0.95);
#   - the echo's p99 (the tail: netstacklat's envelope is <= 6 % tail inflation): traced ÷
#     untraced (<= 1.06);
#   - the trace's own printed cost (each interval's `cost`, from the kernel's BPF run-time
#     counts) per received packet, beside the CPU per echo the untimed full trace measurably
#     added (bare - plain, per echo: each echo is two received packets);
#   - cross-check: the client's `rx_delivery_p50_ns` (SO_TIMESTAMPING, "packet=": the kernel's
#     receive timestamp to the application's read) beside trace's stack + residence p50 of the
#     client's device (v0a) in the same full runs.
# Prints each pair, then min/median/max of every ratio.
# The window falls at random in its interval, so runs should be long beside 10 s.
# Usage: benches/trace-overhead.sh [SECONDS_PER_RUN (3)] [PAIRS (5)]. Needs root, iperf3.
set -euo pipefail
secs=${1:-3}
pairs=${2:-5}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install -y iperf3"; exit 2; }
tracer=
stop_tracer() { [ -n "$tracer" ] && { kill -INT "$tracer" 2>/dev/null || true; wait "$tracer" 2>/dev/null || true; }; tracer=; }
trap 'stop_tracer' EXIT
out=$(mktemp -d)

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; } # user nice system irq softirq
echo_run() { # $1 tag: a server and a client run; the client's and server's JSON summaries
  ip netns exec "$nsb" taskset -c 1 "$bin" bench udp-echo server --listen "$server_addr:4321" \
    --cpu 1 --max-pps-per-source 0 --max-pps 0 --duration $((secs + 3)) --json > "$out/$1.server" 2>/dev/null &
  local s=$!
  sleep 0.5
  local b0; b0=$(busy)
  ip netns exec "$nsa" "$bin" bench udp-echo client "$server_addr:4321" --cpu 0 --timestamp \
    --duration "$secs" --json > "$out/$1.client"
  echo $(( $(busy) - b0 )) > "$out/$1.busy"
  kill -INT "$s" 2>/dev/null || true; wait "$s" 2>/dev/null || true
}
flood_run() { # $1 tag
  ip netns exec "$nsb" taskset -c 1 iperf3 -s -1 -J > "$out/$1.flood" 2>/dev/null &
  local s=$!
  sleep 0.5
  ip netns exec "$nsa" taskset -c 0 iperf3 -c "$server_addr" -u -b 0 -l 64 -t "$secs" > /dev/null 2>&1 || true
  wait "$s" 2>/dev/null || true
}
case_run() { # $1 plain|traced|full|bare|timed, $2 pair number
  local tag="$1.$2" duty= extra=()
  case $1 in
    traced) duty=10 ;; full) duty=100 ;;
    bare) duty=100 extra=(--price 0) ;; timed) duty=100 extra=(--price 100) ;;
  esac
  if [ -n "$duty" ]; then
    "$bin" trace --json --duty "$duty" "${extra[@]}" > "$out/$tag.trace" 2>/dev/null &
    tracer=$!
    sleep 2
  fi
  echo_run "$tag"
  flood_run "$tag"
  stop_tracer
}
echo "machine: $(nproc) CPUs, $(uname -r); $pairs pairs of ${secs} s runs, order alternated"
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) = 1 ]; then order="plain traced full bare timed"; else order="timed bare full traced plain"; fi
  for c in $order; do case_run "$c" "$i"; done
done
python3 - "$out" "$pairs" "$va" <<'PY'
import json, statistics, sys
out, pairs, va = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def last(path, kind):
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    rows = [r for r in rows if r.get("type") == kind]
    return rows[-1] if rows else None
HZ = 100  # USER_HZ: /proc/stat counts in hundredths of a second
def echo(tag):
    c = last(f"{out}/{tag}.client", "summary")
    p50 = c["latency_ns"]["p50"]
    p99 = c["latency_ns"]["p99"]
    busy_ns = int(open(f"{out}/{tag}.busy").read()) * 1e9 / HZ
    cpu = busy_ns / max(1, c["received"])
    rx = (c.get("rx_delivery_ns") or {}).get("p50")
    return p50, cpu, rx, p99
def flood(tag):
    j = json.load(open(f"{out}/{tag}.flood"))
    s = j["end"]["sum"]
    return s["packets"] - s.get("lost_packets", 0)
def traced_split(tag):
    rows = [json.loads(l) for l in open(f"{out}/{tag}.trace") if l.strip().startswith("{")]
    st = [r for iv in rows if iv.get("type") == "interval" for r in iv["stages"] if r.get("dev") == va]
    def p50(stage):
        rs = [r for r in st if r["stage"] == stage and r.get("p50") is not None]
        n = sum(r["count"] for r in rs)
        return sum(r["p50"] * r["count"] for r in rs) / n if n else None
    return p50("stack"), p50("residence")
def own_cost(tag):
    """The trace's own ns per received packet over the run, as it printed it."""
    cs = [iv.get("cost") or {} for iv in
          (json.loads(l) for l in open(f"{out}/{tag}.trace") if l.strip().startswith("{"))
          if iv.get("type") == "interval"]
    ns = sum(c.get("run_ns", 0) for c in cs)
    pk = sum(c.get("packets", 0) for c in cs)
    return ns / pk if pk else None
cases = ("traced", "full", "bare", "timed")
ratios = {(m, k): [] for m in cases for k in ("p50", "p99", "cpu", "flood")}
own, own_all, added = [], [], []
print(f"{'pair':>4} {'case':>6} {'echo p50':>9} {'echo p99':>9} {'cpu/echo':>9} {'flood pkts':>10} {'packet= p50':>12} {'trace stack+res':>16} {'own ns/pkt':>10}")
for i in range(1, pairs + 1):
    pp, pc, _, p99p = echo(f"plain.{i}")
    fp = flood(f"plain.{i}")
    print(f"{i:>4} {'plain':>6} {pp/1e3:8.1f}u {p99p/1e3:8.1f}u {pc/1e3:8.2f}u {fp:10.0f}")
    for m in cases:
        tp, tc, rx, tp99 = echo(f"{m}.{i}")
        ft = flood(f"{m}.{i}")
        stack, res = traced_split(f"{m}.{i}")
        both = (stack or 0) + (res or 0)
        ratios[(m, "p50")].append(tp / pp); ratios[(m, "p99")].append(tp99 / p99p)
        ratios[(m, "cpu")].append(tc / pc); ratios[(m, "flood")].append(ft / fp)
        o = own_cost(f"{m}.{i}")
        if m == "full" and o is not None:
            own.append(o)
        if m == "timed" and o is not None:
            own_all.append(o)
        if m == "bare":
            added.append((tc - pc) / 2)
        print(f"{i:>4} {m:>6} {tp/1e3:8.1f}u {tp99/1e3:8.1f}u {tc/1e3:8.2f}u {ft:10.0f} {(rx or 0)/1e3:11.1f}u {both/1e3:15.1f}u {'-' if o is None else round(o):>10}")
def mmm(r):
    return f"min {min(r):.3f} median {statistics.median(r):.3f} max {max(r):.3f}"
for m in cases:
    for k, target in [("p50", "<= 1.05"), ("p99", "<= 1.06"), ("cpu", "<= 1.10"), ("flood", ">= 0.95")]:
        print(f"{m}/plain {k:<6} {mmm(ratios[(m, k)])}  (target {target})")
if own:
    print(f"full: the trace's own printed cost per received packet (ns, timed 10 %) {mmm(own)}")
if own_all:
    print(f"timed: the same, timed throughout (ns) {mmm(own_all)}")
print(f"bare: CPU the untimed full trace measurably added per received packet (ns; (bare - plain) per echo / 2) {mmm(added)}")
PY
