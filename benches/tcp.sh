#!/usr/bin/env bash
# netsteer bench tcp-stream / tcp-rr beside the anchors, side by side in one run, on loopback
# and across the veth link of `netsteer lab with` (benches/lib.sh):
#   stream, 1, 2 and 4 flows of 128 KiB writes    vs iperf3 -P N            (target ratio >= 1.0)
#   stream, 6 flows of 16-byte writes, nodelay   vs iperf3 -P 6 -l 16 -N   (seed 003's case)
#   the same with 16-byte reads (--read-size 16) vs the same iperf3 (which reads 16 B too)
#   rr, 64 B and 4 KiB, blocking                 vs sockperf ping-pong --tcp (target p50 and p99
#                                                  ratio <= 1.0; RR_SIZES="14 64 4096" for others,
#                                                  14 B being sockperf's smallest)
#   stream receive: copy vs TCP_ZEROCOPY_RECEIVE (netsteer only: Gbit/s, µs/MB, mapped %)
# Every run is priced the same way for both tools: the client process's CPU (getrusage), the
# server process's (/proc/PID/stat over the client's run) and all CPUs' softirq time
# (/proc/stat), per MiB received or per round trip (warm-up included, as the processes' CPU
# is). Every tool runs under the same taskset placement: client on CPU 0, server on CPU 1. Each
# case runs REPEATS times with the tools alternating, and the tool that goes first alternates
# too (netsteer on odd repeats, the anchor on even ones), so neither always inherits the
# other's warm caches or leftover socket state. Tables show min/median/max over the repeats
# and, per ratio, how many pairs met the target and (from 6 repeats up) the median's 95 %
# interval; the last lines give each judged cell's verdict: met, parity (within the pairs'
# noise) or missed (benches/pairs.py).
# Usage: [INTERFERE=N | INTERFERE_CPUS=0,1] [RR_SIZES="64 4096"] benches/tcp.sh
#          [SECONDS_PER_RUN (5)] [REPEATS (3)] [CASES (stream,rr,zc)]
# (INTERFERE: N unpinned busy loops as a background load; INTERFERE_CPUS: one busy loop pinned
# to each listed CPU, a placement that stays the same from run to run). Needs root, iperf3, sockperf,
# python3: apt-get install -y iperf3 sockperf iproute2 python3
set -euo pipefail
secs=${1:-5}
repeats=${2:-3}
cases=${3:-stream,rr,zc}
rr_sizes=${RR_SIZES:-64 4096}
. "$(dirname "$0")/lib.sh"
in_lab -- "$@"
for t in iperf3 sockperf python3; do
  command -v $t >/dev/null || { echo "$t missing: apt-get install -y iperf3 sockperf python3"; exit 2; }
done
[ "$(nproc)" -ge 2 ] || { echo "needs 2 CPUs"; exit 2; }

# The background server's pid: servers are stopped by pid, never by a name pattern that could
# match a user's own iperf3 or sockperf (job specs are unreliable once earlier jobs are reaped).
bg=
stop_bg() { [ -n "$bg" ] && { kill "$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }; bg=; }
trap 'stop_bg; interference_stop' EXIT

results=$(mktemp)
cpufile=$(mktemp)
setpath() { # PATH -> addr, cns, sns
  if [ "$1" = loopback ]; then addr=127.0.0.1; cns=(); sns=(); else addr=$server_addr; cns=(ip netns exec $nsa); sns=(ip netns exec $nsb); fi
}
port() { echo $((20000 + RANDOM % 20000)); }

ns_server() { # starts a netsteer server on $addr:$p in the background
  "${sns[@]}" taskset -c 1 "$bin" bench tcp-stream server --listen "$addr:$p" >/dev/null 2>&1 &
  bg=$!
  sleep 0.4
}

# measure CMD...: runs the client CMD (its output in $out) and leaves the server's ticks and
# the softirq ticks of its run in $cost ("client_cpu_s server_ticks softirq_ticks").
measure() {
  local t0 t1 q0 q1
  t0=$(ticks $bg); q0=$(softirq_ticks)
  out=$(cpuwrap "$cpufile" "$@")
  t1=$(ticks $bg); q1=$(softirq_ticks)
  cost="$(cut -d' ' -f1 "$cpufile") $(( t1 - t0 )) $(( q1 - q0 ))"
}

stream() { # PATH CASE TOOL FLOWS WRITE NODELAY [READ]
  local path=$1 case=$2 tool=$3 flows=$4 write=$5 nodelay=$6 read=${7:-} p out cost; setpath "$path"; p=$(port)
  if [ "$tool" = iperf3 ]; then
    local nd=(); [ "$nodelay" = 1 ] && nd=(-N)
    # Not -1: the server must outlive the client's run for its CPU time to be read.
    "${sns[@]}" taskset -c 1 iperf3 -s -p $p -B $addr >/dev/null 2>&1 &
    bg=$!
    sleep 0.4
    measure "${cns[@]}" taskset -c 0 iperf3 -c $addr -p $p -t "$secs" -P "$flows" -l "$write" "${nd[@]}" -J
    stop_bg
    python3 -c 'import json,sys; r=json.loads(sys.argv[1])["end"]["sum_received"]; print(sys.argv[2], r["bits_per_second"], r["bytes"], sys.argv[3])' \
      "$out" "stream|$path|${case// /_}|iperf3" "$cost" >> "$results"
  else
    local nd=(); [ "$nodelay" = 1 ] && nd=(--nodelay)
    [ -n "$read" ] && nd+=(--read-size "$read")
    ns_server
    measure "${cns[@]}" taskset -c 0 "$bin" bench tcp-stream client $addr:$p --duration "$secs" --flows "$flows" \
      --write-size "$write" "${nd[@]}" --json
    stop_bg
    python3 -c 'import json,sys; s=[json.loads(l) for l in sys.argv[1].splitlines() if "\"summary\"" in l][0]; print(sys.argv[2], s["bits_per_second"], s["bytes"], sys.argv[3])' \
      "$out" "stream|$path|${case// /_}|netsteer" "$cost" >> "$results"
  fi
}

rr() { # PATH SIZE TOOL
  local path=$1 size=$2 tool=$3 p out cost; setpath "$path"; p=$(port)
  if [ "$tool" = sockperf ]; then
    "${sns[@]}" taskset -c 1 sockperf sr --tcp -i $addr -p $p >/dev/null 2>&1 &
    bg=$!
    sleep 0.5
    measure "${cns[@]}" taskset -c 0 sockperf pp --tcp -i $addr -p $p -m "$size" -t "$secs" --full-rtt
    stop_bg
    local p50 p99 rts
    p50=$(echo "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
    p99=$(echo "$out" | sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p')
    # "[Total Run] RunTime=... Warm up time=...; SentMessages=...; ReceivedMessages=N"
    rts=$(echo "$out" | sed -n 's/.*Total Run.*ReceivedMessages=\([0-9]*\).*/\1/p' | head -1)
    echo "rr|$path|$size|sockperf $p50 $p99 $rts $cost" >> "$results"
  else
    ns_server
    measure "${cns[@]}" taskset -c 0 "$bin" bench tcp-rr client $addr:$p --duration "$secs" --warmup 0.4 \
      --request-size "$size" --response-size "$size" --json
    stop_bg
    python3 -c 'import json,sys; s=[json.loads(l) for l in sys.argv[1].splitlines() if "\"summary\"" in l][0]; l=s["latency_ns"]; print(sys.argv[2], l["p50"]/1000, l["p99"]/1000, s["all_transactions"], sys.argv[3])' \
      "$out" "rr|$path|$size|netsteer" "$cost" >> "$results"
  fi
}

zc() { # PATH VARIANT
  local path=$1 variant=$2 p args; setpath "$path"; p=$(port)
  case $variant in
    copy) args=() ;;
    copy-4108-zcsend) args=(--mss 4108 --zerocopy-send) ;;
    zerocopy-4108-zcsend) args=(--mss 4108 --zerocopy-send --zerocopy-recv) ;;
  esac
  ns_server
  local line
  line=$("${cns[@]}" taskset -c 0 "$bin" bench tcp-stream client $addr:$p --duration "$secs" --congestion cubic \
    "${args[@]}" --json | grep '"type":"summary"')
  stop_bg
  python3 - "$line" "zc|$path|$variant" >> "$results" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
mb = s["bytes"] / 2**20
srv = s["cost"]["server"]
mapped = s.get("rx_mapped_bytes")
print(sys.argv[2], s["bits_per_second"], s["cpu_us_per_mb"]["server"], s["softirq_us_per_mb"]["server"] or 0,
      s["cpu_us_per_mb"]["client"], (mapped / s["bytes"] * 100) if mapped is not None else -1, s["retransmits"])
PY
}

interference_start
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "anchors: $(iperf3 --version | head -1 | cut -d' ' -f1-2), sockperf $(sockperf --version 2>&1 | grep -o 'version [0-9.]*' | head -1)"
echo "runs of ${secs}s, ${repeats} repeats per case, tools alternating, cases $cases"
# first_then A B REPEAT: the two tools in this repeat's order.
first_then() { if [ $(($3 % 2)) = 1 ]; then echo "$1 $2"; else echo "$2 $1"; fi; }
for path in loopback veth; do
  for r in $(seq "$repeats"); do
    if [[ ,$cases, == *,stream,* ]]; then
      for tool in $(first_then netsteer iperf3 "$r"); do
        for f in 1 2 4; do stream $path "$f flow(s), 128 KiB writes" $tool $f 131072 0; done
        stream $path "6 flows, 16 B writes, nodelay" $tool 6 16 1
        # iperf3 -l 16 also reads 16 bytes at a time: the same receive work for both.
        stream $path "6 flows, 16 B writes and reads, nodelay" $tool 6 16 1 16
      done
    fi
    if [[ ,$cases, == *,rr,* ]]; then
      for size in $rr_sizes; do
        for tool in $(first_then netsteer sockperf "$r"); do rr $path "$size" $tool; done
      done
    fi
    if [[ ,$cases, == *,zc,* ]]; then
      for v in copy copy-4108-zcsend zerocopy-4108-zcsend; do zc $path $v; done
    fi
  done
done

python3 - "$results" <<'PY'
import sys, statistics
sys.path.insert(0, "benches")
import pairs
st, rr, zc = {}, {}, {}
for l in open(sys.argv[1]):
    f = l.split()
    kind, path, case, *tool = f[0].split("|")
    case = case.replace("_", " ")
    vals = [float(x) for x in f[1:]]
    if kind == "stream":
        # bps bytes client_cpu_s server_ticks softirq_ticks
        st.setdefault((path, case), {}).setdefault(tool[0], []).append(vals)
    elif kind == "rr":
        # p50 p99 round_trips client_cpu_s server_ticks softirq_ticks
        rr.setdefault((path, case), {}).setdefault(tool[0], []).append(vals)
    else:
        zc.setdefault((path, case), []).append(vals)
med = statistics.median
mmm = pairs.mmm
at_least_1 = lambda x: x >= 1.0
at_most_1 = lambda x: x <= 1.0
# Each judged cell's verdict (benches/pairs.py): met, parity (the gap is within the pairs'
# noise) or missed.
judge = pairs.Judge()
ratio = judge.cell
# Process CPU (client + server) and softirq, µs per unit.
def cost(v, units):
    units = max(units, 1)
    return (v[0] + v[1] / 100) * 1e6 / units, v[2] / 100 * 1e6 / units
if st:
    print("\n| path | stream case | netsteer Gbit/s | iperf3 Gbit/s | ratio | CPU µs/MiB netsteer / iperf3 (ratio) | softirq µs/MiB netsteer / iperf3 |")
    print("|---|---|---|---|---|---|---|")
for (path, case), t in st.items():
    ns, ip = t["netsteer"], t["iperf3"]
    r = [a[0] / b[0] for a, b in zip(ns, ip)]
    # Seed 003's 16-byte cases are reported, not judged (the issue's targets are 128 KiB writes).
    rc = pairs.cell(r, at_least_1) if "16 B" in case else ratio(r, at_least_1, f"stream {path} {case}")
    g = lambda v: [x[0] / 1e9 for x in v]
    fmt = "{:.3f}" if "16 B" in case else "{:.2f}"
    cn = [cost(x[2:], x[1] / 2**20) for x in ns]
    ci = [cost(x[2:], x[1] / 2**20) for x in ip]
    cr = [a[0] / b[0] for a, b in zip(cn, ci)]
    print(f"| {path} | {case} | {mmm(g(ns), fmt)} | {mmm(g(ip), fmt)} | {rc} | "
          f"{med([c[0] for c in cn]):.0f} / {med([c[0] for c in ci]):.0f} ({mmm(cr)}) | "
          f"{med([c[1] for c in cn]):.0f} / {med([c[1] for c in ci]):.0f} |")
if rr:
    print("\n| path | tcp-rr size | netsteer p50 µs | sockperf p50 µs | netsteer p99 µs | sockperf p99 µs | p50 ratio | p99 ratio | CPU µs/rt netsteer / sockperf (ratio) | softirq µs/rt netsteer / sockperf |")
    print("|---|---|---|---|---|---|---|---|---|---|")
for (path, size), t in rr.items():
    ns, sp = t["netsteer"], t["sockperf"]
    r50 = [a[0] / b[0] for a, b in zip(ns, sp)]
    r99 = [a[1] / b[1] for a, b in zip(ns, sp)]
    r50c = ratio(r50, at_most_1, f"rr {path} {size} B p50")
    r99c = ratio(r99, at_most_1, f"rr {path} {size} B p99")
    cn = [cost(x[3:], x[2]) for x in ns]
    cs = [cost(x[3:], x[2]) for x in sp]
    cr = [a[0] / b[0] for a, b in zip(cn, cs)]
    crc = ratio(cr, at_most_1, f"rr {path} {size} B CPU per round trip")
    print(f"| {path} | {size} B | {mmm([x[0] for x in ns])} | {mmm([x[0] for x in sp])} | "
          f"{mmm([x[1] for x in ns])} | {mmm([x[1] for x in sp])} | {r50c} | {r99c} | "
          f"{med([c[0] for c in cn]):.2f} / {med([c[0] for c in cs]):.2f} ({crc}) | "
          f"{med([c[1] for c in cn]):.2f} / {med([c[1] for c in cs]):.2f} |")
if zc:
    print("\n| path | receive (sender) | Gbit/s | server threads µs/MiB | server CPU softirq µs/MiB | client threads µs/MiB | mapped % | retransmits |")
    print("|---|---|---|---|---|---|---|---|")
names = {"copy": "read() (plain send)", "copy-4108-zcsend": "read() (MSS 4108, MSG_ZEROCOPY)",
         "zerocopy-4108-zcsend": "TCP_ZEROCOPY_RECEIVE (MSS 4108, MSG_ZEROCOPY)"}
for (path, v), rows in zc.items():
    col = lambda i: [r[i] for r in rows]
    mapped = col(4)
    print(f"| {path} | {names[v]} | {mmm([x / 1e9 for x in col(0)])} | {mmm(col(1), '{:.0f}')} | "
          f"{mmm(col(2), '{:.0f}')} | {mmm(col(3), '{:.0f}')} | "
          f"{mmm(mapped, '{:.3f}') if mapped[0] >= 0 else '-'} | {mmm(col(5), '{:.0f}')} |")
print("\nvalues: min/median/max over the repeats; ratios of back-to-back runs, (k/n) = pairs that met")
print("the target by themselves, [lo, hi] = the median ratio's 95 % interval (from 6 pairs up;")
print("benches/pairs.py); CPU = client + server")
print("process (user + system), softirq = all CPUs' softirq time during the client's run")
judge.report("stream ratio >= 1.00 (128 KiB writes), rr p50, p99 and CPU per round trip ratio <= 1.00")
PY
rm -f "$results" "$cpufile"
