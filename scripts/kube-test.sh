#!/usr/bin/env bash
# The Kubernetes test, under podman kube play: renders the kustomize overlay
# deploy/kubernetes/overlays/podman-test (the base, with an 8-round run) for
# podman (deploy/kubernetes/podman.py), makes its Secrets
# (scripts/kube-secrets.sh: token, TLS for the Service's names, roster,
# client keys), and plays the server's Deployment (its Service's ClusterIP
# pinned with --ip) and the client Job's 2 pods, fleets of 3 and 2 of the 5
# clients (--block), on a podman network. Once the server has done 2 rounds
# it stops the server's pod (SIGTERM), removes it, and plays the server again
# with the same volume, as a rescheduled pod: it checks that the server
# checkpointed and exited 0, that the new pod resumed from the checkpoint,
# that the run finished with every upload of every round counted, once each,
# and that both client pods exited 0 after the run. It reads the server
# pod's /healthz, /readyz and /metrics (--metrics :9090) at its IP, while it
# runs and once the run is over, when it stays up (--linger) until its pod
# is stopped, and then exits 0.
# Without podman, kubectl or python3-yaml it prints that it skipped, exits 0.
#   scripts/kube-test.sh          (CI: .ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "kube test: SKIPPED: needs root (rootful podman: a pod's pinned IP and its volume's path)"
  exit 0
fi
for c in podman kubectl python3 curl; do
  command -v $c >/dev/null || { echo "kube test: SKIPPED: $c is not installed (apt-get install podman runc python3-yaml curl, and kubectl 1.21 or later)"; exit 0; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "kube test: SKIPPED: python3-yaml is not installed"; exit 0; }
kustomize=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [ "${kustomize:-0}" -lt 4 ]; then
  echo "kube test: SKIPPED: kubectl's kustomize is older than v4 (Debian's kubernetes-client 1.20 has v2): install kubectl 1.21 or later"
  exit 0
fi
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
clients=5
pods=2 # the client Job's completions: fleets of --block-size 3
rounds=8
net=fedpq-kube-test
subnet=10.89.177.0/24
ip=10.89.177.10 # the Service fedpq-server's ClusterIP: the server pod's own
server_pod=fedpq-server-pod-0
secret_names="fedpq-token fedpq-tls fedpq-roster fedpq-client-keys"
for s in $secret_names; do
  if podman secret inspect "$s" >/dev/null 2>&1; then
    echo "kube test: podman already holds a secret $s (a play of deploy/kubernetes left behind?): remove it and its pods first" >&2; exit 1
  fi
done
if podman volume exists fedpq-run; then
  echo "kube test: podman already holds a volume fedpq-run: remove it (podman volume rm fedpq-run) if it is no one's run" >&2; exit 1
fi
work=$(mktemp -d)
cleanup() {
  (cd "$work" && podman kube down clients.yaml >/dev/null 2>&1; podman kube down server.yaml >/dev/null 2>&1) || true
  podman pod rm -f "$server_pod" >/dev/null 2>&1 || true
  # podman keeps the run's volume, and a volume for each Secret and ConfigMap mounted.
  for s in $secret_names; do podman secret rm "$s" >/dev/null 2>&1 || true; done
  for v in $secret_names $(podman volume ls -q --filter name=fedpq-run); do podman volume rm -f "$v" >/dev/null 2>&1 || true; done
  podman network rm -f "$net" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" # kube play must not run where a folder is named like the image

"$repo/scripts/image.sh" localhost/fedpq:test
(cd "$repo" && go build -o "$work/bin/fedpq" ./cmd/fedpq)
FEDPQ=$work/bin/fedpq "$repo/scripts/kube-secrets.sh" "$work/secrets" "$clients"
mkdir "$work/podman-secrets"
kubectl kustomize "$repo/deploy/kubernetes/overlays/podman-test" > rendered.yaml
render() { cat rendered.yaml - < <(echo ---; cat "$work/secrets/secrets.yaml") | "$repo/deploy/kubernetes/podman.py" --secrets "$work/podman-secrets" --service fedpq-server=$ip "$@"; }
render --only server > server.yaml
render --only server --rescheduled > server-again.yaml
render --only clients > clients.yaml
for f in podman-secrets/*.json; do podman secret create "$(basename "$f" .json)" "$f" >/dev/null; done
podman network create --subnet "$subnet" "$net" >/dev/null

fail() {
  echo "kube test: FAILED: $*"
  for f in "$work"/server-*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
  podman logs fedpq-clients-0-client 2>&1 | tail -10 | sed 's/^/client 0: /'
  exit 1
}
# logs FILE: the server container's log so far, in FILE.
logs() { podman logs "$server_pod-server" > "$1" 2>&1 || true; }
# play ARGS: podman kube play, whose warnings on this machine ("No more
# static macs left", "failed to connect to syslog") are shown only if it fails.
play() { local out; out=$(podman kube play "$@" 2>&1) || fail "podman kube play $*: $out"; }
# await FILE PATTERN SECONDS: the server's log, in FILE, until it has PATTERN.
await() {
  for _ in $(seq $((5 * $3))); do
    logs "$1"
    grep -q "$2" "$1" && return 0
    sleep 0.2
  done
  return 1
}
play --network "$net" --ip "$ip" server.yaml
play --network "$net" clients.yaml
await server-1.log "round 2 done" 120 || fail "the server did not finish round 2 in 2 minutes"
# What a kubelet's probes and Prometheus would read, from the pod's address.
curl -fsS "http://$ip:9090/healthz" >/dev/null || fail "the server pod's /healthz did not answer 200"
curl -fsS "http://$ip:9090/readyz" >/dev/null || fail "the server pod's /readyz did not answer 200 while it ran"
done_now=$(curl -fsS "http://$ip:9090/metrics" | awk '$1 == "fedpq_server_rounds_done" { print int($2) }')
[ "${done_now:-0}" -ge 2 ] || fail "the server pod's /metrics says ${done_now:-no} rounds done, after round 2"
echo "kube test: round 2 done, /healthz and /readyz 200, /metrics: $done_now rounds done"
# What podman applied of the base's hardening and sizing: the memory limit,
# a read-only root file system, the image's user, no capabilities, and
# GOMEMLIMIT from the memory request (podman.py resolves it as the kubelet
# would); and the memory each pod used, against its request.
# want FILE: "LIMIT-BYTES GOMEMLIMIT" of the rendered pod in FILE.
want() {
  python3 -c 'import sys, yaml
c = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in ("Deployment", "Pod")][0]
c = (c["spec"].get("template", c)["spec"])["containers"][0]
q = c["resources"]["limits"]["memory"]
assert q.endswith("Mi"), q
print(int(q[:-2]) * 2**20, [e["value"] for e in c["env"] if e["name"] == "GOMEMLIMIT"][0])' "$1"
}
for c in "$server_pod-server:server.yaml" "fedpq-clients-0-client:clients.yaml"; do
  name=${c%%:*}
  read -r limit gomemlimit < <(want "${c#*:}")
  got="$(podman inspect --format '{{.HostConfig.Memory}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$name") $(podman inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$name" | grep '^GOMEMLIMIT=' || true)"
  [ "$got" = "$limit true 65532:65532 GOMEMLIMIT=$gomemlimit" ] ||
    fail "$name: memory limit, read-only root, user, GOMEMLIMIT: $got, want $limit true 65532:65532 GOMEMLIMIT=$gomemlimit"
  caps=$(podman inspect --format '{{.EffectiveCaps}}' "$name")
  [ "$caps" = "[]" ] || fail "$name: capabilities $caps, want none"
  echo "kube test: $name: memory limit $limit bytes, read-only root, uid 65532, no capabilities, GOMEMLIMIT=$gomemlimit; using $(podman stats --no-stream --format '{{.MemUsage}}' "$name")"
done
echo "kube test: stopping the server's pod"
podman pod stop -t 30 "$server_pod" >/dev/null
logs server-1.log
code=$(podman inspect --format '{{.State.ExitCode}}' "$server_pod-server")
[ "$code" = 0 ] || fail "the server exited $code on SIGTERM"
stopped=$(sed -n 's/.*stopping after round \([0-9]*\) of.*/\1/p' server-1.log)
[ -n "$stopped" ] || fail "the server did not say where it stopped"
[ "$stopped" -lt "$rounds" ] || fail "the run had finished before the server was stopped"
podman pod rm "$server_pod" >/dev/null
play --network "$net" --ip "$ip" server-again.yaml
await server-2.log "run finished after $rounds rounds" 300 || fail "the rescheduled server did not finish the run in 5 minutes"
grep -q "resuming .* after round $stopped " server-2.log || fail "the rescheduled server did not resume after round $stopped"
runlog=$(podman volume inspect fedpq-run --format '{{.Mountpoint}}')/run/metrics.jsonl
done_rounds=$(grep -o '"round":[0-9]*' "$runlog" | sort -u | wc -l)
all=$(grep -c "\"clients\":$clients,\"dropped\":0," "$runlog" || true)
lines=$(wc -l < "$runlog")
[ "$done_rounds" = "$rounds" ] && [ "$lines" = "$rounds" ] || fail "metrics.jsonl: $lines lines for $done_rounds distinct rounds, want $rounds"
[ "$all" = "$rounds" ] || fail "metrics.jsonl: $all of $rounds rounds had all $clients uploads"
for k in $(seq 0 $((pods - 1))); do
  for _ in $(seq 60); do
    [ "$(podman inspect --format '{{.State.Status}}' "fedpq-clients-$k-client")" = exited ] && break
    sleep 0.5
  done
  code=$(podman inspect --format '{{.State.ExitCode}}' "fedpq-clients-$k-client")
  [ "$code" = 0 ] || fail "client pod $k exited $code"
  grep -q "run finished after $rounds rounds" <(podman logs "fedpq-clients-$k-client" 2>&1) || fail "client pod $k did not see the run finish"
done
# The run is over, and the server stays up (--linger): live, not ready.
sleep 2
[ "$(podman inspect --format '{{.State.Status}}' "$server_pod-server")" = running ] || fail "the server exited after the run, --linger notwithstanding"
http() { curl -s -o /dev/null -w '%{http_code}' "http://$ip:9090/$1"; }
[ "$(http healthz)" = 200 ] || fail "the lingering server's /healthz answered $(http healthz), want 200"
[ "$(http readyz)" = 503 ] || fail "the lingering server's /readyz answered $(http readyz), want 503"
finished=$(curl -fsS "http://$ip:9090/metrics" | awk '$1 == "fedpq_server_run_finished" { print $2 }')
[ "$finished" = 1 ] || fail "the lingering server's /metrics says fedpq_server_run_finished ${finished:-(none)}, want 1"
podman pod stop -t 30 "$server_pod" >/dev/null
logs server-2.log
code=$(podman inspect --format '{{.State.ExitCode}}' "$server_pod-server")
[ "$code" = 0 ] || fail "the lingering server exited $code on SIGTERM"
grep -q "told to stop: exiting" server-2.log || fail "the lingering server did not say it was told to stop"
grep -E "stopping after|round $stopped done" server-1.log
grep -E "resuming|round $rounds done|run finished|staying up|told to stop: exiting" server-2.log
echo "kube test: ok: Deployment + Indexed Job under podman kube play, TLS to the Service's name, server pod stopped after round $stopped and rescheduled: resumed, $rounds rounds with all $clients uploads each; both fleet pods ($clients clients) exited 0; the finished server stayed up (/healthz 200, /readyz 503, run_finished 1) until stopped, and exited 0"
