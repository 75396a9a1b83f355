#!/usr/bin/env bash
# The attacks within the support, measured (docs/security.md, "Poisoning
# within the support"): MNIST, 20 IID clients, the mlp, 1 local epoch of
# SGD (batch 10, lr 0.1, momentum 0.5), updates clipped to fixed:0,0.05,
# every client every round, plain mean aggregation (weighting mean), 5
# rounds; no attack, then 10% and 20% of the clients attacking, for none
# and ldpq at eps 1, over seeds 1 to $SEEDS (default 3). It prints one
# markdown row per case: the final test accuracy of each seed, and their
# mean with its standard error (over the seeds whose run did not stop).
#   scripts/byzantine-demo.sh            # about 10 minutes on 2 cores
#   SEEDS=1 scripts/byzantine-demo.sh    # one seed
# MNIST is read from $FEDPQ_DATA (default ../shared/datasets).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${FEDPQ_DATA:-../shared/datasets}
seeds=${SEEDS:-3}
tmp=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
go build -o "$tmp/fedpq" ./cmd/fedpq
cases=("- 0" "sign-flip 0.1" "sign-flip 0.2" "extreme 0.1" "extreme 0.2" "scale:100 0.2" "label-flip 0.2" "constant 0.2")
echo "| mechanism | attack | attackers | accuracy per seed | mean ± se |"
echo "|---|---|---|---|---|"
for m in none ldpq; do
  for c in "${cases[@]}"; do
    read -r attack fraction <<<"$c"
    [[ $attack == - ]] && attack=
    accs=()
    for seed in $(seq 1 "$seeds"); do
      out=$tmp/$m-${attack:-honest}-$fraction-$seed
      # A run that stops (a model driven to diverge: an honest client's
      # update beyond none's support) counts as "stopped", with why.
      if nice -n 10 "$tmp/fedpq" run --dataset mnist --data-dir "$data" --partition iid --clients 20 --rounds 5 \
        --model mlp --optimizer sgd --epochs 1 --batch 10 --lr 0.1 --momentum 0.5 \
        --mechanism "$m" --epsilon 1 --range fixed:0,0.05 --perturb updates --weighting mean \
        --byzantine "$attack" --byzantine-fraction "$fraction" --seed "$seed" \
        --name "$(basename "$out")" --out "$out" --quiet --format json >"$out.json" 2>"$out.err"; then
        accs+=("$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_accuracy"])' "$out.json")")
      else
        accs+=("stopped ($(tail -1 "$out.err" | sed 's/^fedpq run: //'))")
      fi
    done
    /usr/bin/python3 - "$m" "${attack:-none}" "$fraction" "${accs[@]}" <<'PY'
import statistics, sys
m, attack, fraction, *accs = sys.argv[1:]
a = [float(x) for x in accs if not x.startswith("stopped")]
cells = [f"{float(x):.4f}" if not x.startswith("stopped") else x for x in accs]
se = statistics.stdev(a) / len(a) ** 0.5 if len(a) > 1 else float("nan")
mean = f"{statistics.mean(a):.4f} ± {se:.4f}" if a else "-"
print(f"| {m} | {attack} | {round(float(fraction) * 20)} of 20 | {', '.join(cells)} | {mean} |")
PY
  done
done
