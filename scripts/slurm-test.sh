#!/usr/bin/env bash
# The Slurm test: on the single-node Slurm of scripts/slurm-local.sh (started
# here if it is not running, and stopped again), it submits
#  1. a deployment with deploy/slurm/submit.sh: the server job and 5 clients
#     as a job array of 3 fleets (2, 2 and 1 clients: FEDPQ_BLOCK_SIZE=2),
#     over TLS (fedpq cert, for this node's name), 8 rounds
#     of ldpq with secure aggregation on synthetic data (an MLP, 500 epochs a
#     round: a second or more); once round 2 is done it requeues the server
#     job (scontrol requeue: SIGTERM, then Slurm starts the job again), and
#     checks that the server stopped after a round, the requeued job resumed
#     from it, and the run finished with every upload of every round counted,
#     each round once, and every task saw the end;
#  2. a simulation over 3 seeds with deploy/slurm/fedpq-seeds.sbatch, and
#     checks that each seed's run finished.
# Without Slurm it prints that it skipped and exits 0.
#   scripts/slurm-test.sh          (CI: .ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "slurm test: SKIPPED: needs root (slurmctld and slurmd run as root here)"
  exit 0
fi
if ! command -v sbatch >/dev/null || ! [ -x /usr/sbin/slurmctld ] || ! [ -x /usr/sbin/munged ]; then
  echo "slurm test: SKIPPED: Slurm is not installed (apt-get install slurm-wlm munge)"
  exit 0
fi
export FEDPQ_SLURM_DIR=${FEDPQ_SLURM_DIR:-/var/tmp/fedpq-slurm}
export SLURM_CONF=$FEDPQ_SLURM_DIR/slurm.conf
work=$(mktemp -d)
started=
cleanup() {
  if [ -n "$started" ]; then "$repo/scripts/slurm-local.sh" stop >/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
if ! "$repo/scripts/slurm-local.sh" status >/dev/null 2>&1 || ! sinfo >/dev/null 2>&1; then
  "$repo/scripts/slurm-local.sh" start
  started=1
fi
(cd "$repo" && go build -o "$work/fedpq" ./cmd/fedpq)
export FEDPQ=$work/fedpq
clients=5
block=2 # clients a task: tasks 0-2
tasks=$(((clients + block - 1) / block))
rounds=8
run=$work/deploy

fail() {
  echo "slurm test: FAILED: $*"
  for f in "$run"/fedpq-server-*.out "$run"/fedpq-client-*-0.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}
# wait_jobs ID...: until Slurm no longer lists them (at most 10 minutes).
wait_jobs() {
  local ids
  ids=$(IFS=,; echo "$*")
  for _ in $(seq 600); do
    [ -z "$(squeue -h -j "$ids" 2>/dev/null)" ] && return
    sleep 1
  done
  scancel "$@" || true
  fail "jobs $* still queued or running after 10 minutes"
}

"$FEDPQ" cert --names "$(hostname)" --out "$run/tls" >/dev/null
out=$(FEDPQ_BLOCK_SIZE=$block "$repo/deploy/slurm/submit.sh" "$run" "$clients" --dataset synthetic --model mlp --epochs 500 --rounds "$rounds" \
  --mechanism ldpq --epsilon 1 --secure-aggregation --weighting mean)
echo "$out"
server=$(echo "$out" | sed -n 's/^server job \([0-9]*\),.*/\1/p')
array=$(echo "$out" | sed -n 's/.*clients job array \([0-9]*\) .*/\1/p')
log=$run/fedpq-server-$server.out
for _ in $(seq 600); do
  grep -q "round 2 done" "$log" 2>/dev/null && break
  sleep 0.5
done
grep -q "round 2 done" "$log" 2>/dev/null || { scancel "$server" "$array"; fail "the server job did not finish round 2 in 5 minutes"; }
scontrol requeue "$server"
echo "slurm test: round 2 done; requeued the server job"
wait_jobs "$server" "$array"
grep -q "run finished after $rounds rounds" "$log" || fail "the server job did not finish the run"
stopped=$(sed -n 's/.*stopping after round \([0-9]*\) of.*/\1/p' "$log")
[ -n "$stopped" ] || fail "the server did not say where it stopped when requeued"
[ "$stopped" -lt "$rounds" ] || fail "the run had finished before the server job was requeued"
grep -q "resuming .* after round $stopped " "$log" || fail "the requeued server job did not resume after round $stopped"
lines=$(wc -l < "$run/run/metrics.jsonl")
distinct=$(grep -o '"round":[0-9]*' "$run/run/metrics.jsonl" | sort -u | wc -l)
[ "$lines" = "$rounds" ] && [ "$distinct" = "$rounds" ] || fail "metrics.jsonl: $lines lines for $distinct distinct rounds, want $rounds"
grep -q "unmasking the sum of $clients clients' uploads" "$log" || fail "no securely aggregated round in the server's log"
full=$(grep -c "\"clients\":$clients,\"dropped\":0," "$run/run/metrics.jsonl" || true)
[ "$full" = "$rounds" ] || fail "metrics.jsonl: $full of $rounds rounds had all $clients uploads"
for k in $(seq 0 $((tasks - 1))); do
  grep -q "run finished after $rounds rounds" "$run/fedpq-client-$array-$k.out" || fail "array task $k did not finish"
done
grep -E "round (2|$stopped|$rounds) done|stopping after|resuming|final accuracy" "$log" | uniq
grep -h "run finished after" "$run"/fedpq-client-"$array"-*.out
echo "slurm test: deployment ok: server job $server and $clients clients in a $tasks-task array of fleets, TLS to $(hostname), requeued after round $stopped and resumed, $rounds secure rounds, every upload counted"

sims=$work/seeds
mkdir -p "$sims"
array=$(cd "$sims" && sbatch --parsable --array=1-3 "$repo/deploy/slurm/fedpq-seeds.sbatch" "$repo/experiments/quickstart.yaml" "$sims" --rounds 3)
array=${array%%;*}
wait_jobs "$array"
for s in 1 2 3; do
  grep -q '"rounds": 3,' "$sims/seed-$s/summary.json" 2>/dev/null || { cat "$sims"/fedpq-seed-*.out; fail "seed $s: no finished run in $sims/seed-$s"; }
done
"$FEDPQ" plot --table --out "$sims/accuracy.png" "$sims"/seed-*
echo "slurm test: simulation ok: 3 seeds as a job array"
