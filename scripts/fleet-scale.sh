#!/usr/bin/env bash
# Measures one fedpq server with many clients on this machine (loopback):
# fleets of PER clients each (fedpq client --partition A-B/N) join a server
# of N clients, which runs ROUNDS rounds of MODE. For every round it prints
# one row: the server's resident memory when the round is done (and its
# peak so far), and beyond
# what it held before any client joined, per client; the server's CPU
# seconds since the round before (round 1: since it listened, the joins); the round's steps as the server logged them; the
# largest fleet's resident memory then (the last round's figures are the
# last sample before the server exited, within 0.2 s of its end). The
# table of docs/cluster.md ("10,000 clients on one server") is made with it:
#
#   scripts/fleet-scale.sh 1000 ldpq         # N MODE [PER [ROUNDS [MODEL]]]
#   scripts/fleet-scale.sh 10000 secure 1000 2 linear
#
# MODE is ldpq (plain rounds), corbin (pairs) or secure (ldpq with secure
# aggregation). The data is MNIST from $FEDPQ_DATA (default
# ../shared/datasets); the model linear (or mlp). Logs stay in $KEEP if set.
# FLEET_GOMEMLIMIT (e.g. 1000MiB) is the fleets' GOMEMLIMIT: a secure round
# of 10,000 clients did not fit this machine's 24 GiB without it.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000} MODE=${2:-ldpq} PER=${3:-1000} ROUNDS=${4:-2} MODEL=${5:-linear}
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

mech=$MODE secure=()
case $MODE in
  ldpq | corbin) ;;
  secure) mech=ldpq secure=(--secure-aggregation --weighting mean) ;;
  *) echo "MODE $MODE: want ldpq, corbin or secure" >&2; exit 2 ;;
esac
go build -o "$work/fedpq" ./cmd/fedpq
export FEDPQ_TOKEN=scale
# A round's deadline and each secure step's deadline scale with the
# clients: 10,000 clients on 2 cores take minutes to deal their shares.
steps=$((30 + N / 50))
"$work/fedpq" server --dataset mnist --data-dir "$DATA" --model "$MODEL" --clients "$N" --rounds "$ROUNDS" \
  --mechanism "$mech" "${secure[@]}" --epochs 1 --batch 10 --lr 0.1 --seed 1 --out "$work/run" \
  --listen 127.0.0.1:0 --grace 30m --gather 30s --round-timeout 60m --key-share-timeout "${steps}s" \
  >"$work/server.out" 2>"$work/server.log" &
server=$!
pids+=("$server")
until grep -q "listening on" "$work/server.log"; do
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.2
done
addr=$(sed -nE 's/.*listening on ([0-9.:]+):.*/\1/p' "$work/server.log")
tick=$(getconf CLK_TCK)
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu() { awk -v t="$tick" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat" 2>/dev/null || echo 0; }
base=$(rss "$server")
load=$(cut -d' ' -f1-3 /proc/loadavg)

fleets=()
for ((a = 0; a < N; a += PER)); do
  b=$((a + PER - 1 < N - 1 ? a + PER - 1 : N - 1))
  GOMEMLIMIT=${FLEET_GOMEMLIMIT:-} "$work/fedpq" client --server "$addr" --partition "$a-$b/$N" --data-dir "$DATA" \
    --key "$work/keys" --state "$work/state" --retry-for 30m >"$work/fleet-$a.out" 2>"$work/fleet-$a.log" &
  fleets+=($!)
  pids+=($!)
done

printf '# %d clients, %s, model %s, %d fleets of up to %d; load average at start %s\n' "$N" "$MODE" "$MODEL" "${#fleets[@]}" "$PER" "$load"
printf '# server resident memory before any client joined: %d MB\n' $((base / 1024))
printf '| clients | mode | round | uploads | server RSS MB (peak) | per client KB | server CPU s since the round before (round 1: joins too) | round steps (server log) | fleet RSS MB (max) | load |\n'
seen=0 cpu0=$(cpu "$server") now=0 peak=0 cpunow=0 fleetnow=0
# sample reads the server's memory and CPU time and the fleets' largest
# memory now; row prints the rows of the rounds done since the last call,
# with the last sample.
sample() {
  local r f p m=0
  r=$(rss "$server") && [ "${r:-0}" -gt 0 ] && now=$r && cpunow=$(cpu "$server") && p=$(hwm "$server") && [ "${p:-0}" -gt 0 ] && peak=$p
  for f in "${fleets[@]}"; do
    r=$(rss "$f")
    [ "${r:-0}" -gt "$m" ] && m=$r
  done
  [ "$m" -gt 0 ] && fleetnow=$m
  return 0
}
row() {
  local line uploads
  while [ "$(grep -c "done: " "$work/server.log")" -gt "$seen" ]; do
    seen=$((seen + 1))
    line=$(grep "round $seen done: " "$work/server.log")
    uploads=$(sed -E 's/.*done: ([0-9]+ uploads, [0-9]+ missing).*/\1/' <<<"$line")
    printf '| %d | %s | %d | %s | %d (%d) | %.0f | %.1f | %s | %d | %s |\n' "$N" "$MODE" "$seen" "$uploads" $((now / 1024)) $((peak / 1024)) \
      "$(awk -v a="$now" -v b="$base" -v n="$N" 'BEGIN {print (a - b) / n}')" \
      "$(awk -v a="$cpunow" -v b="$cpu0" 'BEGIN {print a - b}')" \
      "${line##*took }" $((fleetnow / 1024)) "$(cut -d' ' -f1 /proc/loadavg)"
    cpu0=$cpunow
  done
}
while kill -0 "$server" 2>/dev/null; do
  sample
  row
  sleep 0.2
done
row
wait "$server" || { echo "the server failed:" >&2; tail -20 "$work/server.log" >&2; exit 1; }
failed=0
for f in "${fleets[@]}"; do wait "$f" || failed=$((failed + 1)); done
grep -h "run finished" "$work"/fleet-*.out | sort | uniq -c | sed 's/^/# fleets: /'
if [ "$failed" -gt 0 ]; then
  echo "# $failed fleets failed:" >&2
  tail -n 3 "$work"/fleet-*.log >&2
  exit 1
fi
