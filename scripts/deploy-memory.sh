#!/usr/bin/env bash
# Measures the resident memory of a fedpq server and N client processes on
# loopback (experiments/mnist-deploy.yaml: MNIST, mlp, corbin, 3 rounds),
# the clients taking their data in one of two ways:
#   scripts/deploy-memory.sh partition [N]   # --partition K/N of their copy of MNIST
#   scripts/deploy-memory.sh own [N]         # --data: their own 1/N of MNIST (fedpq split, NPZ)
# MNIST is read from $FEDPQ_DATA (default ../shared/datasets). Clients are
# started one after another (each once the one before has loaded its data),
# so that their peaks do not add up on a small machine. It prints, per
# process kind, the resident memory in the last round (VmRSS) and at the
# peak (VmHWM), in MB: the mean, the largest and the sum over the clients.
# It first reads the server's peak before any client joins, and fails if
# it is above issue 34's bound: the test set it evaluates on (MNIST's
# 10,000 images as float32, 30 MB), the model (mlp, 25,818 parameters)
# and 50 MB (MB: 2^20 bytes, as below).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/deploy-memory.sh partition|own [N]}
n=${2:-50}
data=${FEDPQ_DATA:-../shared/datasets}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; [[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
export XDG_CONFIG_HOME=$tmp/config # the clients' keys: not the user's
go build -o "$tmp/fedpq" ./cmd/fedpq
port=$((20000 + RANDOM % 20000))
common=(--config experiments/mnist-deploy.yaml --clients "$n" --out "$tmp/run" --listen "127.0.0.1:$port" --token mem --grace 10m)
case $mode in
partition)
  "$tmp/fedpq" server "${common[@]}" --data-dir "$data" >"$tmp/server.out" 2>"$tmp/server.log" &
  client_data() { echo --partition "$1/$n" --data-dir "$data"; }
  ;;
own)
  "$tmp/fedpq" split --from mnist --data-dir "$data" --clients "$n" --format npz --out "$tmp/split" --quiet >/dev/null
  max=$(sed -n 's/.*"max_examples": \([0-9]*\).*/\1/p' "$tmp/split/manifest.json")
  "$tmp/fedpq" server "${common[@]}" --dataset "" --partition auto --test-data "$tmp/split/test.npz" --max-examples "$max" >"$tmp/server.out" 2>"$tmp/server.log" &
  client_data() { echo --data "$tmp/split/client-$1.npz"; }
  ;;
*)
  echo "mode $mode: want partition or own" >&2
  exit 2
  ;;
esac
server=$!
until grep -q "listening on" "$tmp/server.log"; do
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.2
done
read -r _ hwm _ < <(grep VmHWM "/proc/$server/status") # kB
limit=$(((10000 * 784 * 4 + 25818 * 4) / 1024 + 50 * 1024))
echo "server before any client joined: $((hwm / 1024)) MB at its peak (at most $((limit / 1024)) MB)"
if ((hwm > limit)); then
  echo "the server's peak before any client joined is above the test set, the model and 50 MB" >&2
  exit 1
fi
pids=()
for ((k = 0; k < n; k++)); do
  # shellcheck disable=SC2046
  "$tmp/fedpq" client --server "127.0.0.1:$port" --token mem --seed "$k" $(client_data "$k") 2>"$tmp/client-$k.log" >/dev/null &
  pids+=($!)
  until grep -q "examples; model" "$tmp/client-$k.log"; do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$tmp/client-$k.log" >&2; exit 1; }
    sleep 0.1
  done
done
# Sample every process until it ends (in bash alone, no process per
# sample, so that a round is not over before its clients are read); its
# last sample is its resident memory in the last round.
sample() { # sets last[$2] to "VmHWM VmRSS" of process $1, if it runs
  local k v _ h=
  while read -r k v _; do
    case $k in VmHWM:) h=$v ;; VmRSS:) last[$2]="$h $v" && return ;; esac
  done 2>/dev/null <"/proc/$1/status" || true
}
declare -a last
all=("$server" "${pids[@]}")
while kill -0 "$server" 2>/dev/null; do
  for i in "${!all[@]}"; do sample "${all[$i]}" "$i"; done
  sleep 0.1
done
{
  echo "server ${last[0]}"
  for ((i = 1; i <= n; i++)); do echo "client ${last[i]:-}"; done
} >"$tmp/samples"
wait "$server"
grep "final accuracy" "$tmp/server.out" || true
awk -v mode="$mode" -v n="$n" '
  NF == 3 { rss[$1] += $3 / 1024; hwm[$1] += $2 / 1024; c[$1]++
            if ($3 / 1024 > mrss[$1]) mrss[$1] = $3 / 1024
            if ($2 / 1024 > mhwm[$1]) mhwm[$1] = $2 / 1024 }
  END {
    printf "%s, %d clients (MB: last round / peak)\n", mode, n
    printf "  server: %.0f / %.0f\n", rss["server"], hwm["server"]
    printf "  each client: mean %.1f / %.1f, largest %.1f / %.1f\n", rss["client"] / c["client"], hwm["client"] / c["client"], mrss["client"], mhwm["client"]
    printf "  all %d clients: %.0f / %.0f\n", c["client"], rss["client"], hwm["client"]
  }' "$tmp/samples"
