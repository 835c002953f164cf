#!/usr/bin/env python3
# One tune search JSON report (docs/json.md, tune-search) as the lines BENCHMARKS.md quotes:
# trials, each confirmation, what was found, and each face-off against a static setting.
# Usage: benches/search_summary.py REPORT.json
import json, sys
r = json.load(open(sys.argv[1]))
o = r["outcome"]
def us(x): return f"{x/1000:.1f}"
def short(path):
    # nic/... in full; a queue's file with its queue (rx-1/rps_cpus); else the file's name.
    if path.startswith("nic/"): return path
    parts = path.split("/")
    return "/".join(parts[-2:]) if "queues" in parts else parts[-1]
def desc(c):
    ch = [f'{short(r["dims"][d]["name"])}={r["dims"][d]["levels"][l]}'
          for d, l in enumerate(c) if l != o["baseline"][d]]
    return " ".join(ch) or "baseline"
print(f'trials {len(o["trials"])}, stopped: {o["stopped"]}, not restored: {r["not_restored"]}')
for c in o["confirmations"]:
    print(f'  confirm {desc(c["config"])}: p99 {us(c["latency"]["before"]["median"])} -> {us(c["latency"]["after"]["median"])} us, '
          f'CPU/req {us(c["cost"]["before"]["median"])} -> {us(c["cost"]["after"]["median"])} us, meets {c["meets_goal"]}')
found = desc(o["best"]) if o["best"] is not None else "nothing (the baseline)"
print(f"  found: {found}")
for f in r["against"]:
    print(f'  vs {f["contender"]}: p99 found {us(f["latency"]["before"]["median"])} / static {us(f["latency"]["after"]["median"])} us '
          f'({f["latency"]["verdict"]}), CPU/req found {us(f["cost"]["before"]["median"])} / static {us(f["cost"]["after"]["median"])} us '
          f'({f["cost"]["verdict"]}), static meets goal {f["meets_goal"]}; not applied: {"; ".join(f["skipped"]) or "-"}')
