#!/usr/bin/env bash
# Asynchronous against synchronous FL deployed, in real seconds
# (docs/training.md#deployed): the deployed twin of scripts/async-table.sh.
# Each run is one fedpq server and one fleet of N clients (fedpq client
# --partition 0-(N-1)/N) on loopback with real stragglers (--delay
# tail:0.1:10:S: the lowest tenth of the ids wait 10 S seconds after each
# training, the others S), MNIST split IID, the settings of
# experiments/mnist-MECH.yaml (cnn2, 2 local epochs, updates clipped to
# ±0.05; ldpq and corbin at eps 1, none without privacy), each run spending
# UPLOADS uploads, evaluated every EVERY uploads, in each MODE:
#
#   sync-all       synchronous FedAvg, all N clients a round
#   sync-P         synchronous, P clients a round (sync-100)
#   sync-over      synchronous, M a round from ceil(1.3 M) given the model,
#                  the first M to finish kept (--over-select 0.3)
#   fedasync-lrL   FedAsync: a step per upload (--buffer 1), M training at
#                  once, global learning rate L (fedasync-lr0.1)
#   fedbuffK       FedBuff: M training at once, a step every K uploads
#
# where M (default N/10) is sync-over's round and the async modes'
# concurrency. Async modes weigh an upload s steps stale by (1+s)^-0.5
# (poly:0.5) and start their first buffer once it is full (--gather 0s: no
# restart to wait for). The runs go one after the other (each is timed),
# to OUT/MODE-MECH-sSEED; a run whose summary.json exists is skipped, so the
# script resumes a grid. It ends with scripts/async-summary.py --real's
# table: the server's seconds (metrics.jsonl `seconds`, from its start, the
# fleet's joins included) and uploads to the first evaluation reaching 95%
# and 97%, and each run's load average before it, in OUT/load.tsv.
#
#   scripts/async-deployed.sh       # ldpq, corbin, none; seed 1; every mode
#   MECHS=ldpq SEEDS="2 3" MODES="sync-100 fedbuff50" scripts/async-deployed.sh
#   N=200 M=20 MECHS=none MODES="sync-20 fedbuff10" UPLOADS=600 EVERY=20 scripts/async-deployed.sh
#
# MNIST is read from $FEDPQ_DATA (default ../shared/datasets).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000} M=${M:-$((N / 10))} S=${S:-1}
MECHS=${MECHS:-ldpq corbin none} SEEDS=${SEEDS:-1}
MODES=${MODES:-sync-100 sync-over sync-all fedasync-lr0.1 fedbuff10 fedbuff50 fedbuff100}
UPLOADS=${UPLOADS:-5000} EVERY=${EVERY:-100}
OUT=${OUT:-runs/async-deployed}
DATA=${FEDPQ_DATA:-$(pwd)/../shared/datasets}
mkdir -p "$OUT"
bin=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/fedpq" ./cmd/fedpq
export FEDPQ_TOKEN=async-deployed

# args MODE: the mode's server flags, its steps spending UPLOADS, evaluated
# every EVERY uploads.
args() {
  local async="--mode async --concurrency $M --staleness poly:0.5 --gather 0s" k
  case $1 in
    sync-all) echo "--rounds $((UPLOADS / N)) --eval-every $(((EVERY + N - 1) / N))" ;;
    sync-over) echo "--clients-per-round $M --over-select 0.3 --rounds $((UPLOADS / M)) --eval-every $(((EVERY + M - 1) / M))" ;;
    sync-*) k=${1#sync-}; echo "--clients-per-round $k --rounds $((UPLOADS / k)) --eval-every $(((EVERY + k - 1) / k))" ;;
    fedasync-lr*) echo "$async --buffer 1 --global-lr ${1#fedasync-lr} --rounds $UPLOADS --eval-every $EVERY" ;;
    fedbuff*) k=${1#fedbuff}; echo "$async --buffer $k --rounds $((UPLOADS / k)) --eval-every $(((EVERY + k - 1) / k))" ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}

# run NAME MECH SEED FLAGS...: a server with FLAGS and the fleet, to the run's end.
run() {
  local name=$1 mech=$2 seed=$3
  shift 3
  rm -rf "${OUT:?}/$name" "$OUT/$name.state"
  printf '%s\t%s\n' "$name" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.tsv"
  echo "$(date +%T) $name"
  "$bin/fedpq" server --config "experiments/mnist-$mech.yaml" --data-dir "$DATA" --clients "$N" --seed "$seed" \
    --listen 127.0.0.1:0 --name "$name" --out "$OUT/$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.log" &
  local server=$!
  pids+=("$server")
  until grep -qs "listening on" "$OUT/$name.log"; do
    kill -0 "$server" 2>/dev/null || { cat "$OUT/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  local addr
  addr=$(sed -nE 's/.*listening on ([0-9.:]+):.*/\1/p' "$OUT/$name.log")
  "$bin/fedpq" client --server "$addr" --partition "0-$((N - 1))/$N" --data-dir "$DATA" \
    --delay "tail:0.1:10:$S" --key "$OUT/keys" --state "$OUT/$name.state" --retry-for 5m \
    >"$OUT/$name-fleet.out" 2>"$OUT/$name-fleet.log" &
  local fleet=$!
  pids+=("$fleet")
  wait "$server" || { tail -5 "$OUT/$name.log" >&2; exit 1; }
  wait "$fleet" || true # a fleet that outlives the run's end is cut off
  rm -rf "$OUT/$name.state"
}

for seed in $SEEDS; do for mech in $MECHS; do for mode in $MODES; do
  name=$mode-$mech-s$seed
  [ -f "$OUT/$name/summary.json" ] && continue
  # shellcheck disable=SC2046 # args are words
  run "$name" "$mech" "$seed" $(args "$mode")
done; done; done
scripts/async-summary.py --real "$OUT"
