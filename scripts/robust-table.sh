#!/usr/bin/env bash
# Byzantine robustness, measured (docs/security.md, "Attacks within the
# support, measured"): MNIST, 20 IID clients, the mlp, 1 local epoch of SGD
# (batch 10, lr 0.1, momentum 0.5), updates clipped to fixed:0,0.05, eps 1
# where the mechanism reads it, every client every round, ROUNDS rounds
# (default 5). For each mechanism, aggregator and fraction of attackers
# (ATTACK, default extreme), over seeds 1 to SEEDS (default 3): the final
# test accuracy, mean ± standard error over the seeds. The robust rules
# assume f = 4 attackers (20% of 20), whatever the fraction that attacks.
#
#   scripts/robust-table.sh                       # extreme, 5 rounds, 3 seeds
#   ATTACK=sign-flip MECHS="ldpq none" scripts/robust-table.sh
#
# MNIST is read from $FEDPQ_DATA (default ../shared/datasets); runs stay in $KEEP if set.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${FEDPQ_DATA:-$(pwd)/../shared/datasets}
seeds=${SEEDS:-3} rounds=${ROUNDS:-5} attack=${ATTACK:-extreme}
mechs=${MECHS:-none gaussian ldpq corbin sdq}
aggs=${AGGS:-mean median trimmed-mean:0.2 krum:4 multi-krum:4,12 bulyan:4 norm-bounded}
fractions=${FRACTIONS:-0 0.1 0.2}
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
go build -o "$work/fedpq" ./cmd/fedpq
echo "| mechanism | aggregator | $(for f in $fractions; do printf '%s attackers | ' "$(python3 -c "print(round($f*20))")"; done)"
echo "|---|---|$(for f in $fractions; do printf -- '---|'; done)"
for m in $mechs; do
  for a in $aggs; do
    row="| $m | $a |"
    for f in $fractions; do
      accs=()
      for seed in $(seq 1 "$seeds"); do
        out=$work/$m-$a-$attack-$f-$seed
        if [ -f "$out.json" ] || nice -n 10 "$work/fedpq" run --dataset mnist --data-dir "$data" --partition iid --clients 20 \
          --rounds "$rounds" --model mlp --optimizer sgd --epochs 1 --batch 10 --lr 0.1 --momentum 0.5 \
          --mechanism "$m" --epsilon 1 --range fixed:0,0.05 --perturb updates --weighting mean --aggregator "$a" \
          --byzantine "$attack" --byzantine-fraction "$f" --seed "$seed" --out "$out" --quiet --format json >"$out.json" 2>"$out.err"; then
          accs+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_accuracy"])' "$out.json")")
        else
          rm -f "$out.json"
          accs+=(stopped)
        fi
      done
      row+=" $(python3 - "${accs[@]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1:] if x != "stopped"]
stopped = len(sys.argv[1:]) - len(a)
if not a:
    print("stopped")
else:
    m = 100 * statistics.mean(a)
    se = 100 * statistics.stdev(a) / len(a) ** 0.5 if len(a) > 1 else float("nan")
    print(f"{m:.1f} ± {se:.1f}%" + (f" ({stopped} stopped)" if stopped else ""))
PY
) |"
    done
    echo "$row"
  done
done
