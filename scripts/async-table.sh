#!/usr/bin/env bash
# Asynchronous against synchronous FL, same work (docs/training.md, "Time to
# accuracy"): MNIST split IID among 1,000 clients, the settings of
# experiments/mnist-MECH.yaml (cnn2, 2 local epochs, updates clipped to
# ±0.05; ldpq and corbin at eps 1 per parameter per round, none without
# privacy), the speed model tail:0.1:10 (the slowest 10% ten times slower),
# each run spending UPLOADS (10,000) uploads, in each MODE:
#
#   sync-all     synchronous FedAvg, all 1,000 clients a round
#   sync-100     synchronous, 100 clients a round
#   sync-over    synchronous, 100 a round from 130 sampled (the first 100 to finish)
#   fedasync     FedAsync: a step per upload (buffer 1), 100 clients training at once
#   fedasync-lr0.1   the same at global learning rate 0.1 (not in MODES by default:
#                its step is a tenth, for the many small steps of buffers of one)
#   fedbuff10, fedbuff50, fedbuff100   FedBuff, a step every 10, 50 or 100 uploads
#
# async modes weigh an upload s steps stale by (1+s)^-0.5 (FedBuff's
# poly:0.5). Each run is evaluated every 500 uploads; scripts/async-summary.py
# reads the run directories: the virtual clock and the uploads at the first
# evaluation reaching 95% and 97%, and the final accuracy, over the seeds.
#
#   scripts/async-table.sh                 # every mechanism, mode and seed 1-3
#   SEEDS="1" MECHS="corbin" MODES="sync-100 fedbuff10" scripts/async-table.sh
#   scripts/async-summary.py runs/async-table
#
# Runs go to OUT/NAME (OUT: runs/async-table), two at a time (JOBS), each
# skipped when its summary.json exists, so the script resumes a grid.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
FEDPQ=${FEDPQ:-fedpq}
OUT=${OUT:-runs/async-table}
SEEDS=${SEEDS:-1 2 3}
MECHS=${MECHS:-ldpq corbin none}
MODES=${MODES:-sync-all sync-100 sync-over fedasync fedbuff10 fedbuff50 fedbuff100}
UPLOADS=${UPLOADS:-10000}
JOBS=${JOBS:-2}
DATA_DIR=${DATA_DIR:-$repo/../shared/datasets}
every=500 # uploads between evaluations
args() { # args MODE: the mode's flags, its rounds and evaluations spending UPLOADS
  local async="--mode async --concurrency 100 --staleness poly:0.5"
  case $1 in
    sync-all) echo "--rounds $((UPLOADS / 1000)) --eval-every 1" ;;
    sync-100) echo "--clients-per-round 100 --rounds $((UPLOADS / 100)) --eval-every $((every / 100))" ;;
    sync-over) echo "--clients-per-round 100 --over-select 0.3 --rounds $((UPLOADS / 100)) --eval-every $((every / 100))" ;;
    fedasync) echo "$async --buffer 1 --rounds $UPLOADS --eval-every $every" ;;
    fedasync-lr0.1) echo "$async --buffer 1 --global-lr 0.1 --rounds $UPLOADS --eval-every $every" ;;
    fedbuff*) k=${1#fedbuff}; echo "$async --buffer $k --rounds $((UPLOADS / k)) --eval-every $((every / k))" ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}
mkdir -p "$OUT"
for seed in $SEEDS; do for mech in $MECHS; do for mode in $MODES; do
  name=$mode-$mech-s$seed
  [ -f "$OUT/$name/summary.json" ] && continue
  echo "$name --config $repo/experiments/mnist-$mech.yaml --data-dir $DATA_DIR --clients 1000 --speed tail:0.1:10 --seed $seed $(args $mode)"
done; done; done | xargs -P "$JOBS" -L 1 sh -c 'name=$1; shift; echo "$(date +%T) $name"; "$0" run "$@" --name "$name" --out "'"$OUT"'/$name" > "'"$OUT"'/$name.log" 2>&1 || echo "$name failed: '"$OUT"'/$name.log"' "$FEDPQ"
