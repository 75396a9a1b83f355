#!/bin/bash
# Compares clipping-range rules on issue 23's setting: MNIST, 50 IID clients
# (20% of the training set held out for validation), corbin-cnn, local SGD
# (lr 0.1, momentum 0.5, batch 64, one epoch), corbin (d = 5) on clipped
# updates, global learning rate 1, patience 5. One run per EPS:RANGE
# argument, one after the other, each in OUT/eps-EPS-RANGE-seed-SEED (its
# stderr in the same name .log), then a Markdown table of every run asked for.
#
#   ROUNDS=5 SEED=1 OUT=runs/range FEDPQ=fedpq nice -n 10 scripts/range-compare.sh \
#       0.1:minmax 0.1:fixed:0,0.05 0.1:adaptive
#
# corbin-cnn (225,034 parameters) takes 90 to 180 s a round on the project's
# 2 shared cores. A run whose directory has a summary.json is not run again.
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
		--out "$dir" 2> >(tee "$dir.log" >&2) || echo "== $dir: fedpq run failed"
done
python3 - "${dirs[@]}" <<'PY'
import json, os, re, sys
print("| eps | range | seed | rounds | test accuracy by round | best | radii, last round | stopped by NaN |")
print("|---:|---|---:|---:|---|---:|---|---|")
for d in sys.argv[1:]:
    cfg = open(os.path.join(d, "config.yaml")).read()
    get = lambda k: re.search(r"^%s: (.*)$" % k, cfg, re.M).group(1).strip('"')
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    accs = [(r["accuracy"], r["round"]) for r in rows if "accuracy" in r]
    best = max(accs)
    radii = rows[-1].get("range_radius") or []
    spread = "%.3g to %.3g" % (min(radii), max(radii)) if radii else "-"
    log = open(d + ".log").read() if os.path.exists(d + ".log") else ""
    m = re.search(r"round (\d+): .*diverged", log)
    div = "in round %d" % int(m.group(1)) if m else "no"
    by = " ".join("%.3f" % a for a, _ in accs)
    print("| %s | `%s` | %s | %d | %s | %.4f (round %d) | %s | %s |" % (
        get("epsilon"), get("range"), get("seed"), len(rows), by, best[0], best[1], spread, div))
PY
