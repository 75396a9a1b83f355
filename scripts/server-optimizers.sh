#!/usr/bin/env bash
# Compares server optimizers under LDP on MNIST (docs/training.md, "Server
# optimizers"): experiments/mnist-ldpq.yaml's settings (100 IID clients,
# cnn2, 2 local epochs, updates clipped to ±0.05, eps 1) with each CASE,
# MECHANISM:OPTIMIZER:LR, for ROUNDS rounds and seeds 1..SEEDS. One row per
# case: the test accuracy after round 10 and after the last, as the mean
# over the seeds ± its standard error, and the best round's.
#
#   scripts/server-optimizers.sh 30 3 ldpq:fedavg:1 ldpq:fedadam:0.003
#
# Runs stay in $KEEP if set. Extra settings: $EXTRA (e.g. "--server-beta1 0.5").
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:?ROUNDS} SEEDS=${2:?SEEDS}
shift 2
DATA=${FEDPQ_DATA:-$(pwd)/../shared/datasets}
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
go build -o "$work/fedpq" ./cmd/fedpq
echo "| mechanism | server optimizer | server lr | accuracy after 10 rounds | after $ROUNDS | best | seeds |"
echo "|---|---|---|---|---|---|---|"
for c in "$@"; do
  IFS=: read -r mech opt lr <<<"$c"
  dirs=()
  for seed in $(seq 1 "$SEEDS"); do
    d="$work/$mech-$opt-$lr-$seed"
    [ -f "$d/summary.json" ] || "$work/fedpq" run --config experiments/mnist-ldpq.yaml --data-dir "$DATA" \
      --mechanism "$mech" --server-optimizer "$opt" --global-lr "$lr" --rounds "$ROUNDS" --seed "$seed" \
      ${EXTRA:-} --out "$d" --quiet >"$d.log" 2>&1 || { echo "$c seed $seed failed:" >&2; tail -3 "$d.log" >&2; }
    dirs+=("$d")
  done
  python3 - "$mech" "$opt" "$lr" "${dirs[@]}" <<'PY'
import json, math, sys
mech, opt, lr, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
at10, last, best = [], [], []
for d in dirs:
    try:
        rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    except OSError:
        continue
    acc = [r.get("accuracy") for r in rows]
    acc = [a if a is not None else float("nan") for a in acc]
    at10.append(acc[min(9, len(acc) - 1)]); last.append(acc[-1]); best.append(max(acc))
def ms(v):
    v = [100 * x for x in v]
    if not v:
        return "failed"
    m = sum(v) / len(v)
    if len(v) < 2:
        return f"{m:.2f}%"
    se = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))
    return f"{m:.2f} ± {se:.2f}%"
print(f"| {mech} | {opt} | {lr} | {ms(at10)} | {ms(last)} | {ms(best)} | {len(last)} |")
PY
done
