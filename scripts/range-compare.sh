#!/bin/bash
# Compares clipping-range rules on issue 23's setting: MNIST, 50 IID clients
# (20% of the training set held out for validation), corbin-cnn, local SGD
# (lr 0.1, momentum 0.5, batch 64, one epoch), corbin (d = 5) on clipped
# updates, global learning rate 1, patience 5. One run per EPS:RANGE
# argument and seed (SEEDS, default 1), one after the other, each in
# OUT/eps-EPS-RANGE-seed-SEED (its stderr in the same name .log), then two
# Markdown tables of every run asked for: the mean ± standard error over the
# seeds after rounds 5, 10 and the last, and each run's last round.
#
#   ROUNDS=35 SEEDS="1 2 3" OUT=runs/range FEDPQ=fedpq nice -n 10 scripts/range-compare.sh \
#       0.1:minmax 0.1:fixed:0,0.05 0.1:adaptive
#
# corbin-cnn (225,034 parameters) takes about 9 s a round on the project's
# 2 cores alone, 90 to 180 s shared with four builds. A run whose directory
# has a summary.json is not run again; to lengthen one, raise rounds in its
# config.yaml and run fedpq run --resume DIR (every round's randomness is
# drawn from the run's secret and the round's number, so it ends as a run
# of that length from the start would: experiment.TestResumeLonger).
set -u
fedpq=${FEDPQ:-fedpq}
out=${OUT:-runs/range}
rounds=${ROUNDS:-5}
seeds=${SEEDS:-${SEED:-1}}
data=${FEDPQ_DATA:-../shared/datasets}
mkdir -p "$out"
dirs=()
for seed in $seeds; do
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
done
python3 - "${dirs[@]}" <<'PY'
import json, os, re, statistics, sys
runs = []
for d in sys.argv[1:]:
    cfg = open(os.path.join(d, "config.yaml")).read()
    get = lambda k: re.search(r"^%s: (.*)$" % k, cfg, re.M).group(1).strip('"')
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    accs = {r["round"]: r["accuracy"] for r in rows if "accuracy" in r}
    radii = rows[-1].get("range_radius") or []
    log = open(d + ".log").read() if os.path.exists(d + ".log") else ""
    m = re.search(r"round (\d+): .*diverged", log)
    runs.append(dict(eps=get("epsilon"), range=get("range"), seed=get("seed"), planned=int(get("rounds")),
                     accs=accs, radii=radii, nan=int(m.group(1)) if m else None))

def cell(vals):
    if not vals:
        return "-"
    m = 100 * statistics.mean(vals)
    if len(vals) == 1:
        return "%.2f%%" % m
    return "%.2f ± %.2f%%" % (m, 100 * statistics.stdev(vals) / len(vals) ** 0.5)

# One row per eps and range: the test accuracy after rounds 5, 10 and the
# last planned one (mean ± standard error over the seeds that got there),
# the best round's, and how many seeds ended in NaN.
last = max(r["planned"] for r in runs)
marks = sorted({5, 10, last})
print("| eps | range | seeds | " + " | ".join("after %d rounds" % t for t in marks) + " | best | stopped by NaN |")
print("|---:|---|---:|" + "---:|" * len(marks) + "---:|---|")
groups = {}
for r in runs:
    groups.setdefault((r["eps"], r["range"]), []).append(r)
for (eps, rng), rs in groups.items():
    cols = [cell([r["accs"][t] for r in rs if t in r["accs"]]) + ("" if all(t in r["accs"] for r in rs) else " (%d of %d)" % (sum(t in r["accs"] for r in rs), len(rs))) for t in marks]
    best = cell([max(r["accs"].values()) for r in rs])
    nan = ", ".join("seed %s in round %d" % (r["seed"], r["nan"]) for r in rs if r["nan"]) or "no"
    print("| %s | `%s` | %d | %s | %s | %s |" % (eps, rng, len(rs), " | ".join(cols), best, nan))
print()
# One row per run: its last round, final and best accuracy, and the
# radii of its last round (range_radius, one per tensor).
print("| eps | range | seed | rounds | last accuracy | best | radii, last round |")
print("|---:|---|---:|---:|---:|---:|---|")
for r in runs:
    t = max(r["accs"])
    b = max(r["accs"], key=lambda k: (r["accs"][k], -k))
    spread = "%.3g to %.3g" % (min(r["radii"]), max(r["radii"])) if r["radii"] else "-"
    print("| %s | `%s` | %s | %d | %.4f | %.4f (round %d) | %s |" % (r["eps"], r["range"], r["seed"], t, r["accs"][t], r["accs"][b], b, spread))
PY
