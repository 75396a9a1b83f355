#!/usr/bin/env bash
# The Helm test: deploy/helm/fedpq must render what the kustomize manifests
# do. It builds helm from helm.sh/helm/v3@v3.22.0 into a cache directory
# where it is not there yet ($FEDPQ_HELM names another helm), runs
# helm lint --strict on the chart, and compares, object by object
# (scripts/manifest-diff.py: parsed YAML, every path that differs), what
# helm template renders with
#   the default values              against  deploy/kubernetes/base
#   the podman test's run and tag   against  overlays/podman-test
#   a registry image                against  overlays/registry
#   service.external.enabled        against  overlays/external
#   clients.data.enabled            against  overlays/client-data
#   cluster-test/helm-values.yaml   against  overlays/cluster-test (a fixed
#                                   ClusterIP and its names as hostAliases)
# failing on any difference, and decodes each object strictly into the
# Kubernetes API's Go types and checks each pod template against the
# "restricted" Pod Security level with the admission's own library
# (scripts/kube-schema: no unknown field, no value of the wrong type; an API
# server's own validation is not run). Then it checks that the chart refuses a run
# whose clients differ from clients.count, and renders 10,000 clients in
# blocks of 1,000 and checks the arithmetic (10 pods, the memory rules).
# Without kubectl (kustomize v4 or later) or python3-yaml it prints that it
# skipped and exits 0.
#   scripts/helm-test.sh          (CI: .ci/run calls it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=v3.22.0
command -v kubectl >/dev/null || { echo "helm test: SKIPPED: kubectl is not installed (kubectl 1.21 or later)"; exit 0; }
python3 -c 'import yaml' 2>/dev/null || { echo "helm test: SKIPPED: python3-yaml is not installed"; exit 0; }
kustomize=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
if [ "${kustomize:-0}" -lt 4 ]; then
  echo "helm test: SKIPPED: kubectl's kustomize is older than v4: install kubectl 1.21 or later"
  exit 0
fi
helm=${FEDPQ_HELM:-${XDG_CACHE_HOME:-$HOME/.cache}/fedpq/helm-$version/helm}
if [ -z "${FEDPQ_HELM:-}" ] && ! "$helm" version --short 2>/dev/null | grep -q "^$version"; then
  echo "helm test: building helm $version into $(dirname "$helm") (once; a few minutes)"
  mkdir -p "$(dirname "$helm")"
  # The version and the Kubernetes version (its k8s.io modules', 1.37) that
  # helm's Makefile sets: without them helm template assumes Kubernetes 1.20,
  # which the chart's kubeVersion refuses.
  h=helm.sh/helm/v3
  ldflags="-X $h/internal/version.version=$version -X $h/pkg/chartutil.k8sVersionMajor=1 -X $h/pkg/chartutil.k8sVersionMinor=37"
  ldflags+=" -X $h/pkg/lint/rules.k8sVersionMajor=1 -X $h/pkg/lint/rules.k8sVersionMinor=37"
  (cd "$(dirname "$helm")" && GOBIN=$(pwd) CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -ldflags "$ldflags" "$h/cmd/helm@$version")
fi
echo "helm test: helm $("$helm" version --short), $(kubectl version --client | grep Kustomize)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chart=$repo/deploy/helm/fedpq
overlays=$repo/deploy/kubernetes/overlays
fail() { echo "helm test: FAILED: $*"; exit 1; }

"$helm" lint --strict "$chart" || fail "helm lint --strict"
# Every object decoded strictly into the API's Go types, every pod template
# checked against the restricted Pod Security level (scripts/kube-schema).
(cd "$repo/scripts/kube-schema" && CGO_ENABLED=0 go build -o "$work/kube-schema" .)
# compare NAME KUSTOMIZE-DIR [helm template flags]: helm's and kustomize's objects.
compare() {
  local name=$1 dir=$2; shift 2
  "$helm" template fedpq "$chart" "$@" > "$work/$name-helm.yaml" || fail "$name: helm template $*"
  kubectl kustomize "$dir" > "$work/$name-kustomize.yaml"
  local out
  out=$("$repo/scripts/manifest-diff.py" "$work/$name-kustomize.yaml" "$work/$name-helm.yaml") ||
    fail "$name: the chart ($*) and $(realpath --relative-to="$repo" "$dir") differ:"$'\n'"$out"
  local decoded
  decoded=$("$work/kube-schema" < "$work/$name-kustomize.yaml") || fail "$name: not the API's types, or not restricted:"$'\n'"$decoded"
  echo "helm test: $name: $out as $(realpath --relative-to="$repo" "$dir"); ${decoded##*$'\n'kube-schema: }"
}
compare base "$repo/deploy/kubernetes/base"
compare podman-test "$overlays/podman-test" --set-file run="$overlays/podman-test/run.yaml" --set image.tag=test
compare registry "$overlays/registry" --set image.repository=registry.example.com/fedpq/fedpq --set image.tag=0.1.0
compare external "$overlays/external" --set service.external.enabled=true
compare client-data "$overlays/client-data" --set clients.data.enabled=true --set-file run="$overlays/client-data/run.yaml"
compare cluster-test "$overlays/cluster-test" -f "$overlays/cluster-test/helm-values.yaml" --set-file run="$overlays/cluster-test/run.yaml"

# A run of 6 clients with clients.count 5 is refused.
sed 's/^clients: 5$/clients: 6/' "$repo/deploy/kubernetes/base/run.yaml" > "$work/run6.yaml"
if out=$("$helm" template fedpq "$chart" --set-file run="$work/run6.yaml" 2>&1); then
  fail "the chart rendered a run of 6 clients with clients.count 5"
fi
grep -q "run: has clients: 6, clients.count is 5" <<<"$out" || fail "the chart refused a run of 6 clients for another reason: $out"
# 10,000 clients in pods of 1,000: 10 pods; the server's memory request
# 64Mi + 150Ki x 10,000 = 1529Mi (limit 1912Mi), a fleet's 256Mi + 1Mi x
# 1,000 = 1256Mi (limit 1570Mi).
sed 's/^clients: 5$/clients: 10000/' "$repo/deploy/kubernetes/base/run.yaml" > "$work/run10k.yaml"
"$helm" template fedpq "$chart" --set-file run="$work/run10k.yaml" --set clients.count=10000 --set clients.blockSize=1000 > "$work/10k.yaml"
python3 - "$work/10k.yaml" <<'PY' || fail "10,000 clients: not what the rules give"
import sys, yaml
docs = {d["kind"] + "/" + d["metadata"]["name"]: d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
job, server = docs["Job/fedpq-clients"]["spec"], docs["Deployment/fedpq-server"]["spec"]["template"]["spec"]["containers"][0]
client = job["template"]["spec"]["containers"][0]
got = (job["completions"], job["parallelism"], [a for a in client["args"] if a.startswith(("--partition", "--block-size"))],
       server["resources"]["requests"]["memory"], server["resources"]["limits"]["memory"],
       client["resources"]["requests"]["memory"], client["resources"]["limits"]["memory"])
want = (10, 10, ["--partition=0-9999/10000", "--block-size=1000"], "1529Mi", "1912Mi", "1256Mi", "1570Mi")
print(f"helm test: 10,000 clients in blocks of 1,000: {got}")
sys.exit(got != want)
PY
echo "helm test: ok: helm lint --strict; the chart renders the base and its 5 overlays object for object, each object of the API's types and each pod of the restricted level; it refuses a run whose clients differ from clients.count; 10,000 clients: 10 pods, memory as the rules give"
