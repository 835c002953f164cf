#!/bin/sh
# What netsteer says and does on every fixture tree, written to one directory so that two
# builds can be compared with `diff -r` (a refactor that should change nothing proves it so):
#   support/outputs.sh BIN OUT
# For each tree under fixtures/hosts and fixtures/real: `doctor --json`, `tune plan --json` for
# the three profiles, `tune apply --profile latency --irqbalance stop` on a copy (its report,
# journal, applied plan and the files it changed), the rollback of it, and `watch --replay` of a
# recorded drop storm on CPU 0 with --apply (its events and the tree's changed files).
# Times, the scratch directory's name and process ids are replaced by fixed words.
set -eu
BIN=$(realpath "$1")
OUT=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
SCRATCH=$(mktemp -d /tmp/ns-outputs.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT INT TERM

norm() {
    sed -e "s#$SCRATCH#SCRATCH#g" \
        -e 's/"\([a-z_]*_unix\)":[0-9.]*/"\1":T/g' \
        -e 's/"\(at\|elapsed_s\|seconds_since\)":[0-9.e-]*/"\1":T/g'
}

run() { # name, then the command; stdout+exit code into OUT/name
    name=$1
    shift
    rc=0
    "$@" >"$SCRATCH/o" 2>"$SCRATCH/e" || rc=$?
    { norm <"$SCRATCH/o"; echo "exit $rc"; norm <"$SCRATCH/e"; } >"$OUT/$name"
}

changed() { # tree copy against its original: the files that differ, with their content
    (cd "$2" && find . -type f | sort | while read -r f; do
        if ! cmp -s "$f" "$1/$f"; then echo "== $f"; cat "$f"; fi
    done)
}

for tree in "$HERE"/fixtures/hosts/* "$HERE"/fixtures/real/*; do
    [ -d "$tree/proc" ] || [ -d "$tree/sys" ] || continue
    t=$(basename "$tree")
    run "$t.doctor" "$BIN" --root "$tree" doctor --json
    for p in latency throughput balanced; do
        run "$t.plan.$p" "$BIN" --root "$tree" tune plan --profile "$p" --irqbalance stop --json
    done
    copy="$SCRATCH/tree"
    rm -rf "$copy" "$SCRATCH/state"
    cp -a "$tree" "$copy"
    run "$t.apply" "$BIN" --root "$copy" tune apply --profile latency --irqbalance stop \
        --state-dir "$SCRATCH/state" --json
    for j in "$SCRATCH"/state/journal/*; do
        [ -f "$j" ] && norm <"$j" >>"$OUT/$t.apply.journal"
    done
    [ -f "$SCRATCH/state/applied.json" ] && norm <"$SCRATCH/state/applied.json" >"$OUT/$t.apply.plan"
    changed "$tree" "$copy" | norm >"$OUT/$t.apply.files"
    run "$t.rollback" "$BIN" --root "$copy" tune rollback --state-dir "$SCRATCH/state" --json
    changed "$tree" "$copy" | norm >"$OUT/$t.rollback.files"
    # A drop storm on CPU 0 for three intervals, then quiet, in the tree's own CPU count.
    ncpu=$(grep -c '^cpu[0-9]' "$tree/proc/stat" 2>/dev/null || echo 1)
    python3 - "$ncpu" >"$SCRATCH/loads.jsonl" <<'EOF'
import json, sys
n = int(sys.argv[1])
for drops in [400.0, 400.0, 400.0, 0.0, 0.0, 0.0]:
    zero = dict.fromkeys(["usr", "nice", "sys", "iowait", "irq", "steal", "guest", "gnice"], 0.0)
    cpus = [dict(zero, cpu=c, idle=95.0, soft=5.0, dropped=drops if c == 0 else 0.0,
                 squeezed=0.0) for c in range(n)]
    print(json.dumps({"source": "sampled", "seconds": 1.0,
                      "cpu": {"interval_s": 1.0, "cpus": cpus, "went_offline": [], "irqs": []},
                      "net": {"devices": [], "udp_in": None, "udp_rcvbuf_errors": None}}))
EOF
    rm -rf "$copy" "$SCRATCH/state"
    cp -a "$tree" "$copy"
    run "$t.watch" "$BIN" --root "$copy" watch --replay "$SCRATCH/loads.jsonl" --apply \
        --persist 1 --state-dir "$SCRATCH/state" --json
    changed "$tree" "$copy" | norm >"$OUT/$t.watch.files"
done
echo "$(ls "$OUT" | wc -l) files in $OUT"
