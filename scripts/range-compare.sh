#!/bin/bash
# Compares clipping-range rules on issue 23's setting: MNIST, 50 IID clients
# (20% of the training set held out for validation), corbin-cnn, local SGD
# (lr 0.1, momentum 0.5, batch 64, one epoch), corbin (d = 5) on clipped
# updates, global learning rate 1, patience 5. One run per EPS:RANGE
# argument, one after the other, each in OUT/eps-EPS-RANGE; then the table.
#
#   ROUNDS=5 SEED=1 OUT=runs/range FEDPQ=fedpq nice -n 10 scripts/range-compare.sh \
#       0.1:minmax 0.1:fixed:0,0.05 0.1:adaptive
#
# corbin-cnn (225,034 parameters) takes about 90 s a round on the project's
# 2 shared cores: 9 runs of 5 rounds take about 70 minutes.
set -u
fedpq=${FEDPQ:-fedpq}
out=${OUT:-runs/range}
rounds=${ROUNDS:-5}
seed=${SEED:-1}
data=${FEDPQ_DATA:-../shared/datasets}
mkdir -p "$out"
dirs=()
for arg in "$@"; do
	eps=${arg%%:*}
	rng=${arg#*:}
	dir="$out/eps-$eps-$(echo "$rng" | tr ':,' '--')-seed-$seed"
	dirs+=("$dir")
	[ -f "$dir/summary.json" ] && continue
	echo "== eps $eps range $rng seed $seed -> $dir"
	# A run that diverges ends with an error; the rounds before it are in
	# its metrics.jsonl, and the comparison goes on.
	FEDPQ_DATA=$data "$fedpq" run --name "eps $eps $rng" --dataset mnist --partition iid --clients 50 \
		--model corbin-cnn --optimizer sgd --lr 0.1 --momentum 0.5 --epochs 1 --batch 64 \
		--mechanism corbin --shared-bits 5 --epsilon "$eps" --perturb updates --range "$rng" \
		--global-lr 1 --validation 0.2 --patience 5 --rounds "$rounds" --seed "$seed" \
		--out "$dir" || echo "== $dir: fedpq run failed ($?)"
done
