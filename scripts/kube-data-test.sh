#!/usr/bin/env bash
# The test of clients that bring their own data on Kubernetes, under podman
# kube play: the overlay deploy/kubernetes/overlays/client-data (each fleet
# pod K mounts the directory fleet-K of one volume, subPathExpr
# fleet-$(JOB_COMPLETION_INDEX); the server mounts its test/) with a run of
# its own: scikit-learn's breast cancer set split among 5 clients by fedpq
# split, laid out as fleet-0/data/client-{0,1,2}.csv, fleet-1/data/
# client-{3,4}.csv and test/test.csv on a host directory that plays the
# claim (podman.py --claim), 3 rounds of ldpq with secure aggregation. It
# checks that the run finished with every round's 5 uploads, that both pods
# exited 0 having seen the run finish, and that each pod kept its clients'
# state files in its own directory, and only those.
# Without podman, kubectl, python3-yaml or the data set it prints that it
# skipped and exits 0.
#   scripts/kube-data-test.sh          (CI: .ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "kube data test: SKIPPED: needs root (rootful podman: a pod's pinned IP, files owned by the pods' user)"
  exit 0
fi
for c in podman kubectl python3; do
  command -v $c >/dev/null || { echo "kube data test: SKIPPED: $c is not installed (apt-get install podman runc python3-yaml, and kubectl 1.21 or later)"; exit 0; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "kube data test: SKIPPED: python3-yaml is not installed"; exit 0; }
kustomize=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
[ "${kustomize:-0}" -ge 4 ] || { echo "kube data test: SKIPPED: kubectl's kustomize is older than v4: install kubectl 1.21 or later"; exit 0; }
csv=/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv
[ -f "$csv" ] || { echo "kube data test: SKIPPED: $csv is missing (apt-get install python3-sklearn)"; exit 0; }
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
clients=5
rounds=3
net=fedpq-kube-data-test
subnet=10.89.178.0/24
ip=10.89.178.10
server_pod=fedpq-server-pod-0
secret_names="fedpq-token fedpq-tls fedpq-roster fedpq-client-keys"
for s in $secret_names; do
  if podman secret inspect "$s" >/dev/null 2>&1; then
    echo "kube data test: podman already holds a secret $s (a play of deploy/kubernetes left behind?): remove it and its pods first" >&2; exit 1
  fi
done
if podman volume exists fedpq-run; then
  echo "kube data test: podman already holds a volume fedpq-run: remove it (podman volume rm fedpq-run) if it is no one's run" >&2; exit 1
fi
work=$(mktemp -d)
cleanup() {
  (cd "$work" && podman kube down clients.yaml >/dev/null 2>&1; podman kube down server.yaml >/dev/null 2>&1) || true
  for s in $secret_names; do podman secret rm "$s" >/dev/null 2>&1 || true; done
  for v in $secret_names $(podman volume ls -q --filter name=fedpq-run); do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
  podman network rm -f "$net" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" # kube play must not run where a folder is named like the image

"$repo/scripts/image.sh" localhost/fedpq:test
(cd "$repo" && go build -o "$work/bin/fedpq" ./cmd/fedpq)
FEDPQ_OWN_DATA=1 FEDPQ=$work/bin/fedpq "$repo/scripts/kube-secrets.sh" "$work/secrets" "$clients"
"$work/bin/fedpq" split --from "$csv" --clients "$clients" --partition iid --out "$work/split" > split.log 2>&1 || { cat split.log; exit 1; }
tail -1 split.log
# The claim's layout: a directory per fleet pod (blocks of 3), the test set.
vol=$work/volume
mkdir -p "$vol/fleet-0/data" "$vol/fleet-1/data" "$vol/test"
for k in 0 1 2; do cp "$work/split/client-$k.csv" "$vol/fleet-0/data/"; done
for k in 3 4; do cp "$work/split/client-$k.csv" "$vol/fleet-1/data/"; done
cp "$work/split/test.csv" "$vol/test/"
chown -R 65532:65532 "$vol"
# The overlay with this run, as an operator's own overlay would have it.
mkdir "$work/k"
cat > "$work/k/run.yaml" <<RUN
name: cluster-data-test
test_data: /etc/fedpq/test/test.csv
clients: $clients
rounds: $rounds
model: linear
mechanism: ldpq
epsilon: 1
secure_aggregation: true
weighting: mean
seed: 1
RUN
cat > "$work/k/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$work/k" "$repo/deploy/kubernetes/overlays/client-data")
configMapGenerator:
- name: fedpq-run
  behavior: replace
  files:
  - run.yaml
images:
- name: localhost/fedpq
  newTag: test
KUST
mkdir "$work/podman-secrets"
kubectl kustomize "$work/k" > rendered.yaml
render() { cat rendered.yaml - < <(echo ---; cat "$work/secrets/secrets.yaml") | "$repo/deploy/kubernetes/podman.py" --secrets "$work/podman-secrets" --service fedpq-server=$ip --claim fedpq-data="$vol" "$@"; }
render --only server > server.yaml
render --only clients > clients.yaml
for f in podman-secrets/*.json; do podman secret create "$(basename "$f" .json)" "$f" >/dev/null; done
podman network create --subnet "$subnet" "$net" >/dev/null

fail() {
  echo "kube data test: FAILED: $*"
  podman logs "$server_pod-server" 2>&1 | tail -20 | sed 's/^/server: /'
  for k in 0 1; do podman logs "fedpq-clients-$k-client" 2>&1 | tail -10 | sed "s/^/client pod $k: /"; done
  exit 1
}
play() { local out; out=$(podman kube play "$@" 2>&1) || fail "podman kube play $*: $out"; }
play --network "$net" --ip "$ip" server.yaml
play --network "$net" clients.yaml
for _ in $(seq 1500); do
  podman logs "$server_pod-server" 2>&1 | grep -q "run finished after $rounds rounds" && break
  sleep 0.2
done
podman logs "$server_pod-server" > server.log 2>&1
grep -q "run finished after $rounds rounds" server.log || fail "the server did not finish the run in 5 minutes"
runlog=$(podman volume inspect fedpq-run --format '{{.Mountpoint}}')/run/metrics.jsonl
all=$(grep -c "\"clients\":$clients,\"dropped\":0," "$runlog" || true)
[ "$all" = "$rounds" ] || fail "metrics.jsonl: $all of $rounds rounds had all $clients uploads"
for k in 0 1; do
  for _ in $(seq 60); do
    [ "$(podman inspect --format '{{.State.Status}}' "fedpq-clients-$k-client")" = exited ] && break
    sleep 0.5
  done
  code=$(podman inspect --format '{{.State.ExitCode}}' "fedpq-clients-$k-client")
  [ "$code" = 0 ] || fail "client pod $k exited $code"
  grep -q "run finished after $rounds rounds" <(podman logs "fedpq-clients-$k-client" 2>&1) || fail "client pod $k did not see the run finish"
done
# Each pod's clients' state files, in its own directory and nowhere else.
states=$(cd "$vol" && find . -name '*.state' | sort | paste -sd ' ')
want="./fleet-0/config/fedpq/client-0.state ./fleet-0/config/fedpq/client-1.state ./fleet-0/config/fedpq/client-2.state ./fleet-1/config/fedpq/client-3.state ./fleet-1/config/fedpq/client-4.state"
[ "$states" = "$want" ] || fail "state files: $states, want $want"
grep -E "round [0-9]+ done|run finished" server.log
for k in 0 1; do podman logs "fedpq-clients-$k-client" 2>&1 | grep "run finished"; done
echo "kube data test: ok: overlays/client-data under podman kube play: 2 fleet pods, each with its own directory (fleet-0: clients 0-2, fleet-1: clients 3-4) of the data claim, the server with the test set only; $rounds secure rounds with all $clients uploads; both pods exited 0; state files: $states"
