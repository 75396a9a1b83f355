#!/usr/bin/env bash
# The container test: builds the image (scripts/image.sh) and runs a fedpq
# server container and 5 client containers on a podman network, over TLS
# (a certificate for the server's container name, made here), through 2
# rounds of ldpq with secure aggregation on synthetic data. It checks the
# server's summary and metrics: every round had 5 uploads and no dropout,
# and the run finished. Without podman it prints that it skipped and exits 0.
#   scripts/container-test.sh          (CI: .ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "container test: SKIPPED: needs root (rootful podman: the run directory is chowned to the image's user 65532)"
  exit 0
fi
if ! command -v podman >/dev/null; then
  echo "container test: SKIPPED: podman is not installed (apt-get install podman runc)"
  exit 0
fi
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
image=localhost/fedpq:test
clients=5
rounds=2
id=fedpq-ct-$$
work=$(mktemp -d)
cleanup() {
  for k in $(seq 0 $((clients - 1))); do podman rm -f -v -t 0 "$id-client-$k" >/dev/null 2>&1 || true; done
  podman rm -f -v -t 0 "$id-server" >/dev/null 2>&1 || true
  podman network rm -f "$id" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" # podman resolves nothing from here; see deploy/podman/containers.conf

"$repo/scripts/image.sh" "$image"
"$repo/scripts/tls-cert.sh" "$work/tls" "$id-server" >/dev/null
mkdir -p "$work/run" && chown 65532:65532 "$work/run"

podman network create "$id" >/dev/null
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
podman run -d --name "$id-server" --network "$id" -e FEDPQ_TOKEN="$token" \
  -v "$work/tls:/tls:ro" -v "$work/run:/var/lib/fedpq/run" "$image" \
  server --dataset synthetic --model linear --clients "$clients" --rounds "$rounds" \
  --mechanism ldpq --epsilon 1 --secure-aggregation --weighting mean \
  --listen :7070 --out /var/lib/fedpq/run --tls-cert /tls/server.crt --tls-key /tls/server.key >/dev/null
for k in $(seq 0 $((clients - 1))); do
  podman run -d --name "$id-client-$k" --network "$id" -e FEDPQ_TOKEN="$token" -v "$work/tls/ca.crt:/tls/ca.crt:ro" "$image" \
    client --server "$id-server:7070" --partition "$k/$clients" --tls-ca /tls/ca.crt --retry-for 1m >/dev/null
done
status=$(timeout 300 podman wait "$id-server" || echo timeout)
podman logs "$id-server" > "$work/server.log" 2>&1
for k in $(seq 0 $((clients - 1))); do podman wait "$id-client-$k" >/dev/null || true; done
podman logs "$id-client-0" > "$work/client-0.log" 2>&1

fail() { echo "container test: FAILED: $*"; echo "--- server log"; cat "$work/server.log"; echo "--- client 0 log"; cat "$work/client-0.log"; exit 1; }
[ "$status" = 0 ] || fail "the server container ended with $status"
for k in $(seq 0 $((clients - 1))); do
  s=$(podman inspect --format '{{.State.ExitCode}}' "$id-client-$k")
  [ "$s" = 0 ] || fail "client container $k ended with $s"
done
[ -s "$work/run/summary.json" ] || fail "no summary.json in the run directory"
grep -q "\"rounds\": $rounds," "$work/run/summary.json" || fail "summary.json does not count $rounds rounds"
full=$(grep -c "\"clients\":$clients,\"dropped\":0," "$work/run/metrics.jsonl" || true)
[ "$full" = "$rounds" ] || fail "metrics.jsonl: $full of $rounds rounds had all $clients uploads"
grep -q "unmasking the sum of $clients clients' uploads" "$work/server.log" || fail "no securely aggregated round in the server's log"
grep -q "run finished after $rounds rounds" "$work/server.log" || fail "the server did not finish the run"
grep -E "round [0-9]+ done|run finished|final accuracy" "$work/server.log"
echo "container test: ok: a server and $clients client containers, TLS to $id-server, $rounds secure rounds, every upload counted"
