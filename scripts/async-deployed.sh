#!/usr/bin/env bash
# Times a deployed synchronous run against a deployed asynchronous one
# (FedBuff) in real seconds on loopback: one fedpq server and one fleet of
# N clients (fedpq client --partition 0-(N-1)/N) with real stragglers
# (--delay tail:0.1:10:S: the lowest tenth of the ids wait 10 S after each
# training, the others S), the same data, model and delays, run twice:
#
#   sync:    --clients-per-round P, SYNC_ROUNDS rounds, evaluated every round
#   fedbuff: --mode async --concurrency P --buffer K --staleness poly:0.5,
#            ASYNC_STEPS steps, evaluated every 2 (every 2K uploads),
#            --gather 0s (a server's first buffer otherwise waits --gather
#            for updates held across a restart)
#
# For each it prints the server's real seconds (metrics.jsonl `seconds`,
# from the server's start, the fleet's joins included) and the uploads
# spent to first reach each target accuracy. The synchronous run does not
# over-select (fedpq server --over-select F would), so sync is plain.
#
#   scripts/async-deployed.sh                 # N P K S MECHANISM
#   scripts/async-deployed.sh 200 20 10 1 none
#
# Settings: experiments/mnist-ldpq.yaml (cnn2, 2 local epochs, updates
# clipped to +-0.05) with --mechanism MECHANISM (default none: ldpq at
# eps 1 would need many more steps with 10 or 20 clients a step than a
# few minutes give; docs/training.md#deployed), MNIST from $FEDPQ_DATA
# (default ../shared/datasets). TARGETS (default "0.90 0.95 0.97"),
# SYNC_ROUNDS (20) and ASYNC_STEPS (60) override. Logs stay in $KEEP if set.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200} P=${2:-20} K=${3:-10} S=${4:-1} MECH=${5:-none}
TARGETS=${TARGETS:-0.90 0.95 0.97} SYNC_ROUNDS=${SYNC_ROUNDS:-20} ASYNC_STEPS=${ASYNC_STEPS:-60}
DATA=${FEDPQ_DATA:-$(pwd)/../shared/datasets}
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/fedpq" ./cmd/fedpq
export FEDPQ_TOKEN=async-deployed
common=(--config experiments/mnist-ldpq.yaml --data-dir "$DATA" --clients "$N" --mechanism "$MECH" --listen 127.0.0.1:0)

# run NAME FLAGS...: a server with FLAGS and the fleet, to the run's end.
run() {
  local name=$1
  shift
  "$work/fedpq" server "${common[@]}" --name "$name" --out "$work/$name" "$@" \
    >"$work/$name.out" 2>"$work/$name.log" &
  local server=$!
  pids+=("$server")
  until grep -qs "listening on" "$work/$name.log"; do
    kill -0 "$server" 2>/dev/null || { cat "$work/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  local addr
  addr=$(sed -nE 's/.*listening on ([0-9.:]+):.*/\1/p' "$work/$name.log")
  "$work/fedpq" client --server "$addr" --partition "0-$((N - 1))/$N" --data-dir "$DATA" \
    --delay "tail:0.1:10:$S" --key "$work/keys" --state "$work/state-$name" --retry-for 5m \
    >"$work/$name-fleet.out" 2>"$work/$name-fleet.log" &
  local fleet=$!
  pids+=("$fleet")
  wait "$server"
  wait "$fleet"
}

# row NAME LABEL: the table's row of run NAME, read from its metrics.jsonl.
row() {
  jq -rs --arg name "$2" --arg targets "$TARGETS" '
    def upto(i): [.[:i + 1][].clients] | add;
    . as $r
    | [($targets | split(" ") | map(select(. != "") | tonumber))[] as $t
       | ([$r | to_entries[] | select((.value.accuracy // 0) >= $t)] | first) as $hit
       | if $hit then "\($hit.value.seconds * 10 | round / 10) s, \($r | upto($hit.key)) uploads (step \($hit.value.round))"
         else "not reached" end]
    | "| \($name) | " + join(" | ")
      + " | \([$r[] | select(.accuracy)] | last | .accuracy * 10000 | round / 100)%, \($r | last | .seconds * 10 | round / 10) s, \([$r[].clients] | add) uploads |"
  ' "$work/$1/metrics.jsonl"
}

load=$(cut -d' ' -f1-3 /proc/loadavg)
run sync --clients-per-round "$P" --rounds "$SYNC_ROUNDS" --eval-every 1
run fedbuff --mode async --concurrency "$P" --buffer "$K" --staleness poly:0.5 --rounds "$ASYNC_STEPS" --eval-every 2 \
  --gather 0s # no restart to wait for: the first buffer starts once full
printf '# %d clients, mechanism %s, --delay tail:0.1:10:%s; load average before %s, after %s\n' \
  "$N" "$MECH" "$S" "$load" "$(cut -d' ' -f1-3 /proc/loadavg)"
header="| run |"
for t in $TARGETS; do header+=" to $t |"; done
printf '%s end: accuracy, seconds, uploads |\n' "$header"
printf '|---|%s---|\n' "$(for t in $TARGETS; do printf -- '---|'; done)"
row sync "sync, $P a round"
row fedbuff "FedBuff, M $P, K $K, poly:0.5"
