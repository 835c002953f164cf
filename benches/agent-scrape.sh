#!/usr/bin/env bash
# Scrape time of `netsteer agent` beside prometheus-node-exporter's, on this host, alternated
# scrape by scrape, all servers pinned to CPU 1 and the scraper to CPU 0:
#   - netsteer agent on the live host (every family, the doctor's evaluation, tune drift)
#   - netsteer agent on the 128-CPU/64-queue fixture (--root fixtures/hosts/mlx5-128cpu)
#   - node_exporter with its default collectors (the anchor)
# Prints min/median/max of the time to the last byte of GET /metrics (ms) and the series count.
# Goal (issue 19): the 128-CPU fixture below 10 ms and 5,000 series.
#   benches/agent-scrape.sh [SCRAPES]     (default 200 per target; needs prometheus-node-exporter)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
command -v prometheus-node-exporter >/dev/null || { echo "needs prometheus-node-exporter (apt-get install prometheus-node-exporter)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 2; }
cargo build --release -q -p netsteer -p netsteer-agent --examples
bin=$PWD/target/release/netsteer
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
taskset -c 1 "$bin" agent --listen 127.0.0.1:19641 --state-dir "$(mktemp -d)" 2>/dev/null & pids+=($!)
taskset -c 1 "$bin" --root fixtures/hosts/mlx5-128cpu agent --listen 127.0.0.1:19642 2>/dev/null & pids+=($!)
taskset -c 1 prometheus-node-exporter --web.listen-address=127.0.0.1:19100 2>/dev/null & pids+=($!)
sleep 1
echo "machine: $(nproc) CPUs, $(uname -r); $n scrapes per target, alternated; servers on CPU 1, scraper on CPU 0"
taskset -c 0 python3 - "$n" <<'PY'
import http.client, statistics, sys, time
n = int(sys.argv[1])
targets = [("netsteer agent, this host", 19641), ("netsteer agent, mlx5-128cpu fixture", 19642),
           ("node_exporter (defaults), this host", 19100)]
times = {p: [] for _, p in targets}
series = {}
def scrape(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0 = time.perf_counter()
    c.request("GET", "/metrics")
    body = c.getresponse().read()
    dt = time.perf_counter() - t0
    c.close()
    return dt, body
for _, p in targets:          # warm-up: page cache, first-scrape paths
    scrape(p)
for i in range(n):
    for _, p in (targets if i % 2 == 0 else list(reversed(targets))):
        dt, body = scrape(p)
        times[p].append(dt * 1000)
        series[p] = sum(1 for l in body.decode().splitlines() if l and not l.startswith("#"))
print(f"{'target':<40} {'min ms':>8} {'median':>8} {'max':>8} {'series':>7}")
for name, p in targets:
    t = times[p]
    print(f"{name:<40} {min(t):8.2f} {statistics.median(t):8.2f} {max(t):8.2f} {series[p]:7d}")
ne = statistics.median(times[19100])
print(f"ratio of medians vs node_exporter: this host {statistics.median(times[19641]) / ne:.2f}x, "
      f"128-CPU fixture {statistics.median(times[19642]) / ne:.2f}x")
PY
echo "in process (no HTTP, no process start), CPU 1:"
taskset -c 1 target/release/examples/scrape_time fixtures/hosts/mlx5-128cpu "$n"
