#!/usr/bin/env bash
# The container test: builds the image (scripts/image.sh) and runs a fedpq
# server container and 2 fleet containers, clients 0-2 and 3-4 of 5, on a
# podman network, over TLS (a certificate for the server's container name,
# made by the image's own fedpq cert), through 2 rounds of ldpq with secure
# aggregation on synthetic data. It checks the server's summary and metrics:
# every round had 5 uploads and no dropout, and the run finished; and that
# both fleets exited 0. Without podman it prints that it skipped and exits 0.
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
fleets="0-2 3-4" # each container's clients: --partition A-B/5
rounds=2
id=fedpq-ct-$$
work=$(mktemp -d)
cleanup() {
  for f in $fleets; do podman rm -f -v -t 0 "$id-clients-$f" >/dev/null 2>&1 || true; done
  podman rm -f -v -t 0 "$id-server" >/dev/null 2>&1 || true
  podman network rm -f "$id" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" # podman resolves nothing from here; see deploy/podman/containers.conf

"$repo/scripts/image.sh" "$image"
# The image makes its own certificate, as the user it runs as (65532), who
# then owns server.key (mode 600).
mkdir -p "$work/tls" "$work/run" && chown 65532:65532 "$work/tls" "$work/run"
# (what it prints, and podman's warnings, shown only where it fails)
made=$(podman run --rm -v "$work/tls:/tls" "$image" cert --names "$id-server" --out /tls 2>&1) || { echo "container test: FAILED: fedpq cert in the image: $made"; exit 1; }

podman network create "$id" >/dev/null
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
podman run -d --name "$id-server" --network "$id" -e FEDPQ_TOKEN="$token" \
  -v "$work/tls:/tls:ro" -v "$work/run:/var/lib/fedpq/run" "$image" \
  server --dataset synthetic --model linear --clients "$clients" --rounds "$rounds" \
  --mechanism ldpq --epsilon 1 --secure-aggregation --weighting mean \
  --listen :7070 --out /var/lib/fedpq/run --tls-cert /tls/server.pem --tls-key /tls/server.key >/dev/null
for f in $fleets; do
  podman run -d --name "$id-clients-$f" --network "$id" -e FEDPQ_TOKEN="$token" -v "$work/tls/ca.pem:/tls/ca.pem:ro" "$image" \
    client --server "$id-server:7070" --partition "$f/$clients" --tls-ca /tls/ca.pem --retry-for 1m >/dev/null
done
status=$(timeout 300 podman wait "$id-server" || echo timeout)
podman logs "$id-server" > "$work/server.log" 2>&1
for f in $fleets; do
  podman wait "$id-clients-$f" >/dev/null || true
  podman logs "$id-clients-$f" > "$work/clients-$f.log" 2>&1
done

fail() {
  echo "container test: FAILED: $*"; echo "--- server log"; cat "$work/server.log"
  for f in $fleets; do echo "--- clients $f log"; cat "$work/clients-$f.log"; done
  exit 1
}
[ "$status" = 0 ] || fail "the server container ended with $status"
for f in $fleets; do
  s=$(podman inspect --format '{{.State.ExitCode}}' "$id-clients-$f")
  [ "$s" = 0 ] || fail "the container of clients $f ended with $s"
  grep -q "run finished after $rounds rounds" "$work/clients-$f.log" || fail "the fleet of clients $f did not see the run finish"
done
[ -s "$work/run/summary.json" ] || fail "no summary.json in the run directory"
grep -q "\"rounds\": $rounds," "$work/run/summary.json" || fail "summary.json does not count $rounds rounds"
full=$(grep -c "\"clients\":$clients,\"dropped\":0," "$work/run/metrics.jsonl" || true)
[ "$full" = "$rounds" ] || fail "metrics.jsonl: $full of $rounds rounds had all $clients uploads"
grep -q "unmasking the sum of $clients clients' uploads" "$work/server.log" || fail "no securely aggregated round in the server's log"
grep -q "run finished after $rounds rounds" "$work/server.log" || fail "the server did not finish the run"
grep -E "round [0-9]+ done|run finished|final accuracy" "$work/server.log"
grep -h "run finished" "$work"/clients-*.log
echo "container test: ok: a server and $clients clients in 2 fleet containers ($fleets), TLS to $id-server (fedpq cert), $rounds secure rounds, every upload counted"
