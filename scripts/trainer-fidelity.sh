#!/usr/bin/env bash
# The PyTorch example (python/examples/mnist_cnn2.py, an external trainer) against fedpq's own
# engine on the settings of experiments/mnist-ldpq.yaml, one run of each per seed: the final test
# accuracy per seed, the mean and standard error of each and of their paired difference (a seed
# gives both the same initial model and partition), and where the PyTorch runs' time went.
#
#   scripts/trainer-fidelity.sh [SEEDS [ROUNDS]]      # default 5 seeds, 10 rounds
#
# Needs Debian's python3-torch (with libopenblas0-pthread) and MNIST in $FEDPQ_DATA (default
# ../shared/datasets). Runs go to $OUT (default runs/trainer-fidelity); a run whose summary.json
# exists is not run again, so the script can be stopped and started again.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-5}
rounds=${2:-10}
data=${FEDPQ_DATA:-../shared/datasets}
out=${OUT:-runs/trainer-fidelity}
mkdir -p "$out"
go build -o "$out/fedpq" ./cmd/fedpq
for s in $(seq 1 "$seeds"); do
  for e in native pytorch; do
    dir="$out/$e-$s"
    [ -e "$dir/summary.json" ] && continue
    args=(run --config experiments/mnist-ldpq.yaml --data-dir "$data" --rounds "$rounds" --seed "$s" --out "$dir" --quiet)
    if [ "$e" = pytorch ]; then
      args+=(--trainer "/usr/bin/python3 python/examples/mnist_cnn2.py")
    fi
    echo "seed $s, $e" >&2
    "$out/fedpq" "${args[@]}" >/dev/null
  done
done

python3 - "$out" "$seeds" <<'PY'
import json, math, sys
out, seeds = sys.argv[1], int(sys.argv[2])
runs = {(e, s): json.load(open(f"{out}/{e}-{s}/summary.json")) for e in ("native", "pytorch") for s in range(1, seeds + 1)}
def se(v):
    m = sum(v) / len(v)
    return m, (math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v)) if len(v) > 1 else 0)
print("| seed | native | PyTorch | PyTorch - native |")
print("|---:|---:|---:|---:|")
n, p = [], []
for s in range(1, seeds + 1):
    n.append(100 * runs["native", s]["final_accuracy"])
    p.append(100 * runs["pytorch", s]["final_accuracy"])
    print(f"| {s} | {n[-1]:.2f}% | {p[-1]:.2f}% | {p[-1] - n[-1]:+.2f} |")
(mn, sn), (mp, sp), (md, sd) = se(n), se(p), se([b - a for a, b in zip(n, p)])
print(f"| mean ± s.e. ({seeds} seeds) | {mn:.2f}% ± {sn:.2f} | {mp:.2f}% ± {sp:.2f} | {md:+.2f} ± {sd:.2f} |")
r = sum(runs["pytorch", s]["rounds"] for s in range(1, seeds + 1))
tot = lambda k: sum(runs["pytorch", s]["trainer"][k] for s in range(1, seeds + 1))
wall = sum(runs["pytorch", s]["seconds"] for s in range(1, seeds + 1))
native = sum(runs["native", s]["seconds"] for s in range(1, seeds + 1))
user, sec, data = tot("user_seconds"), tot("seconds"), tot("data_seconds")
proc = runs["pytorch", 1]["trainer"]["processes"]
print(f"\nPyTorch runs ({proc} trainer processes): {wall / r:.2f} s a round, fedpq's engine {native / r:.2f} s.")
print(f"In the trainers' code {user / r:.2f} s a round (all processes); in the protocol {(sec - user) / r:.3f} s "
      f"({100 * (sec - user) / user:.1f}%), of which sending examples {data / r:.3f} s (each example once to each process) "
      f"and the rest {(sec - user - data) / r:.3f} s ({100 * (sec - user - data) / user:.2f}%).")
PY
