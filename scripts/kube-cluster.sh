#!/usr/bin/env bash
# fedpq on a real Kubernetes control plane, on this one machine:
#   scripts/kube-cluster.sh            (as root; docs/cluster.md, "A real control plane")
# builds (once, into a cache: $FEDPQ_KUBE_BIN, default ~/.cache/fedpq/kube-v1.37.2)
# etcd v3.7.3 and kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet and kube-proxy of Kubernetes v1.37.2 from their Go modules
# (deploy/kubernetes/controlplane/{etcd,kube}: pinned go.mod and go.sum), and
# a pause image (deploy/kubernetes/controlplane/pause); then, in a private
# directory, starts etcd, the API server (token auth, loopback), the
# controller manager and scheduler, Debian's containerd (its own root, state,
# socket, a CNI bridge of its own and the local pause image as sandbox), a
# kubelet and kube-proxy (iptables) on it, and imports fedpq's image
# (scripts/image.sh) into containerd. It then
#   1. applies the base and every overlay under deploy/kubernetes/overlays
#      with kubectl apply --server-side --dry-run=server, and prints what the
#      API server warned about (a rejection fails the test);
#   2. applies overlays/cluster-test for real (server-side) in the namespace
#      fedpq, with the Secrets of scripts/kube-secrets.sh and a local
#      PersistentVolume for the server's claim, and checks what the
#      controllers made of it: the claim bound, the Deployment's ReplicaSet
#      and pod, the Indexed Job's pods with indices 0 and 1 and their fleets,
#      the Job's backoff as the API server stored it, the Service's ClusterIP
#      and its EndpointSlice (the ready server pod);
#   3. runs the run: /healthz, /readyz, /metrics through the Service's
#      ClusterIP (kube-proxy), the pod Ready; kills the server's process
#      (SIGKILL): the kubelet restarts the container, which resumes from its
#      checkpoint on the volume; kills a client pod's process: its index is
#      retried (a restarted container with restartPolicy OnFailure, a new pod
#      of the same index with Never); deletes the server pod: the Deployment
#      makes another, which resumes; the run finishes with every round in
#      metrics.jsonl, the Job completes, and the finished server lingers, live
#      (no liveness restart) but not ready: out of the Service's endpoints;
#      The server's live page and /metrics are read through kubectl
#      port-forward mid-run;
#   4. installs deploy/helm/fedpq (the helm binary scripts/helm-test.sh
#      builds) in a second namespace with the values that render
#      overlays/cluster-test, runs a short run to its end, and uninstalls it;
#   5. tears everything down: the namespaces, then each process it started,
#      by PID, kube-proxy's and the kubelet's rules, the CNI bridge and every
#      mount under its directory.
# Without containerd, runc, the CNI plugins, podman, kubectl, openssl or curl,
# or not as root, it prints that it skipped and exits 0.
# With --validate it builds and starts etcd and kube-apiserver only, and does
# step 1.
# Environment: FEDPQ_KUBE_BIN (the binaries' cache), FEDPQ_KUBE_KEEP=1 (leave
# the cluster's directory, its logs, after the run), FEDPQ_KUBE_BASES (more
# kustomize directories to dry-run, e.g. another checkout's base).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
validate_only=0
case "${1:-}" in
  --validate) validate_only=1 ;; # etcd and kube-apiserver only, and step 1
  "") ;;
  *) echo "usage: $0 [--validate]" >&2; exit 2 ;;
esac
say() { echo "kube cluster: $*"; }
if [ "$(id -u)" != 0 ]; then say "SKIPPED: needs root (containerd, a kubelet, iptables)"; exit 0; fi
needed="kubectl openssl curl go python3 ip"
[ $validate_only = 1 ] || needed="$needed containerd ctr runc podman iptables"
for c in $needed; do
  command -v $c >/dev/null || { say "SKIPPED: $c is not installed (apt-get install containerd runc containernetworking-plugins podman iptables curl openssl, and kubectl 1.21 or later)"; exit 0; }
done
cni_bin=/usr/lib/cni
for p in bridge host-local loopback portmap; do
  [ $validate_only = 1 ] || [ -x $cni_bin/$p ] || { say "SKIPPED: the CNI plugin $cni_bin/$p is missing (apt-get install containernetworking-plugins)"; exit 0; }
done
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

# --- the binaries, built once -------------------------------------------------
kube_version=v1.37.2
bin=${FEDPQ_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/fedpq/kube-$kube_version}
mkdir -p "$bin"
cp=$repo/deploy/kubernetes/controlplane
if [ ! -x "$bin/etcd" ]; then
  say "building etcd (go.etcd.io/etcd/server/v3, $cp/etcd/go.mod) into $bin"
  (cd "$cp/etcd" && go build -o "$bin/etcd.new" go.etcd.io/etcd/server/v3) && mv "$bin/etcd.new" "$bin/etcd"
fi
# The version Kubernetes' own build stamps (hack/lib/version.sh): without it
# the binaries say v0.0.0-master.
ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
done
tools="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
[ $validate_only = 1 ] && tools=kube-apiserver
for t in $tools; do
  if [ ! -x "$bin/$t" ]; then
    say "building $t (k8s.io/kubernetes $kube_version, $cp/kube/go.mod) into $bin: minutes"
    (cd "$cp/kube" && go build -ldflags "$ldflags" -o "$bin/$t.new" "k8s.io/kubernetes/cmd/$t") && mv "$bin/$t.new" "$bin/$t"
  fi
done
say "binaries ready in $bin ($(elapsed))"

# --- the cluster's directory and ports ------------------------------------------
work=$(mktemp -d /var/tmp/fedpq-kube-cluster.XXXXXX)
chmod 755 "$work"
etcd_port=23790 peer_port=23800 api_port=16443 kcm_port=20257 sched_port=20259
kubelet_port=20250 kubelet_healthz=20248 proxy_healthz=20256 proxy_metrics=20249 forward_port=19090
pod_cidr=10.244.7.0/24 pod_gw=10.244.7.1 svc_cidr=10.96.0.0/24 cluster_ip=10.96.0.70
bridge=fedpqk0 node=fedpq-node ns=fedpq helm_ns=fedpq-helm
for p in $etcd_port $peer_port $api_port $kcm_port $sched_port $kubelet_port $kubelet_healthz $proxy_healthz $proxy_metrics $forward_port; do
  if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then say "port $p is in use: another cluster (or another test) is running?" >&2; exit 1; fi
done
if ip link show $bridge >/dev/null 2>&1; then say "the bridge $bridge exists: a cluster of this script left behind? (ip link del $bridge)" >&2; exit 1; fi
pids=()
start() { # start NAME CMD...: runs CMD in the background, its output in $work/logs/NAME.log
  local name=$1; shift
  "$@" > "$work/logs/$name.log" 2>&1 &
  pids+=("$!")
  echo "$!" > "$work/pids/$name"
}
mkdir -p "$work/logs" "$work/pids"
kc() { kubectl --kubeconfig "$work/kubeconfig" "$@"; }
ctrc() { ctr --address "$work/containerd/containerd.sock" -n k8s.io "$@"; }
stopped=0
teardown() {
  local rc=$?
  [ $stopped = 1 ] && return; stopped=1
  set +e
  if [ -f "$work/kubeconfig" ] && [ -f "$work/pids/kubelet" ]; then
    # Pods first, through the kubelet, so that containerd stops their
    # sandboxes and the CNI plugins release their addresses.
    kc delete namespace $ns $helm_ns --wait=true --timeout=90s >/dev/null 2>&1
  fi
  # Every container left (in the order started: the shims are children of
  # no one, so each is killed by its PID, found by this cluster's socket).
  if [ -S "$work/containerd/containerd.sock" ]; then
    for c in $(ctrc tasks ls -q 2>/dev/null); do ctrc tasks kill -s SIGKILL "$c" >/dev/null 2>&1; done
    sleep 1
    for c in $(ctrc containers ls -q 2>/dev/null); do ctrc tasks delete -f "$c" >/dev/null 2>&1; ctrc containers delete "$c" >/dev/null 2>&1; done
  fi
  # Each process in the reverse order of their start, each gone before the
  # next is told (the API server, told with etcd, waits on it until killed).
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[$i]}
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' ' ' 2>/dev/null < "$f" | grep -q "containerd-shim.*-address $work/containerd/containerd.sock"; then
      p=${f#/proc/}; p=${p%/cmdline}; kill -KILL "$p" 2>/dev/null
    fi
  done
  [ -x "$bin/kube-proxy" ] && [ -f "$work/pids/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1
  ip link del $bridge >/dev/null 2>&1
  # The kubelet's own chains (KUBE-FIREWALL, which drops outside packets to
  # 127.0.0.0/8, and its canaries), for IPv4 and IPv6, unless another
  # kubelet's were there before this one started.
  if [ "${kubelet_chains_ours:-0}" = 1 ]; then
    for ipt in iptables ip6tables; do
      for ch in INPUT OUTPUT; do while $ipt -t filter -D $ch -j KUBE-FIREWALL 2>/dev/null; do :; done; done
      for t in filter nat mangle; do
        for c in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do $ipt -t $t -F $c 2>/dev/null && $ipt -t $t -X $c 2>/dev/null; done
      done
    done
  fi
  # CNI's masquerade rules for this cluster's pods, if a sandbox was not torn down.
  iptables -t nat -S POSTROUTING 2>/dev/null | grep -- "-s 10.244.7." | sed 's/^-A/-D/' | while read -r r; do eval iptables -t nat "$r"; done
  for m in $(awk -v w="$work" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r); do umount -l "$m" 2>/dev/null; done
  if [ "${FEDPQ_KUBE_KEEP:-0}" = 1 ] || [ $rc != 0 ]; then
    say "the cluster's directory (logs in $work/logs) is kept: rm -rf $work"
  else
    rm -rf "$work"
  fi
}
trap teardown EXIT
fail() {
  echo "kube cluster: FAILED: $*"
  kc get all,pvc,pv,endpointslices -n $ns -o wide 2>&1 | sed 's/^/  /'
  kc get events -n $ns --sort-by=.lastTimestamp 2>&1 | tail -25 | sed 's/^/  event: /'
  for p in $(kc get pods -n $ns -o name 2>/dev/null); do echo "--- kubectl logs $p"; kc logs -n $ns "$p" --tail 6 2>&1; done
  for l in "$work"/logs/*.log; do echo "--- $l"; tail -n 8 "$l"; done
  exit 1
}
# until SECONDS WHAT CMD...: CMD until it succeeds, or fail with WHAT. A
# condition that reads the cluster is a function (cond), so that it is read
# anew on each try.
until_ok() {
  local s=$1 what=$2; shift 2
  local end=$(($(date +%s) + s))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt $end ] || fail "$what (after $s s)"
    sleep 0.5
  done
}

# --- etcd and the control plane -------------------------------------------------
start etcd "$bin/etcd" --name default --data-dir "$work/etcd" \
  --listen-client-urls http://127.0.0.1:$etcd_port --advertise-client-urls http://127.0.0.1:$etcd_port \
  --listen-peer-urls http://127.0.0.1:$peer_port --initial-advertise-peer-urls http://127.0.0.1:$peer_port \
  --initial-cluster default=http://127.0.0.1:$peer_port --listen-metrics-urls ''
until_ok 60 "etcd did not answer" curl -fsS http://127.0.0.1:$etcd_port/health
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n')
(umask 077 && echo "$token,admin,admin,system:masters" > "$work/tokens.csv")
mkdir -p "$work/pki"
start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:$etcd_port \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port $api_port --endpoint-reconciler-type=none \
  --cert-dir "$work/pki" --service-cluster-ip-range $svc_cidr \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$work/sa.key" \
  --service-account-signing-key-file "$work/sa.key" \
  --authorization-mode=AlwaysAllow --token-auth-file "$work/tokens.csv" \
  --kubelet-preferred-address-types=InternalIP,Hostname
until_ok 180 "kube-apiserver was not ready" curl -fsSk -H "Authorization: Bearer $token" https://127.0.0.1:$api_port/readyz
kubectl config --kubeconfig "$work/kubeconfig" set-cluster local --server https://127.0.0.1:$api_port \
  --certificate-authority "$work/pki/apiserver.crt" --embed-certs >/dev/null
kubectl config --kubeconfig "$work/kubeconfig" set-credentials admin --token "$token" >/dev/null
kubectl config --kubeconfig "$work/kubeconfig" set-context local --cluster local --user admin >/dev/null
kubectl config --kubeconfig "$work/kubeconfig" use-context local >/dev/null
say "etcd and kube-apiserver ready ($(elapsed)): $(kc version -o json 2>/dev/null | python3 -c 'import json,sys; print("server", json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
if [ $validate_only = 1 ]; then
  kc create namespace $ns >/dev/null
else
start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$work/kubeconfig" \
  --service-account-private-key-file "$work/sa.key" --root-ca-file "$work/pki/apiserver.crt" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port $kcm_port
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$work/kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port $sched_port
say "kube-controller-manager and kube-scheduler started ($(elapsed))"

# --- containerd, its images, CNI ---------------------------------------------------
mkdir -p "$work/containerd" "$work/cni/net.d" "$work/cni/ipam" "$work/images"
pause_image=localhost/fedpq-pause:$kube_version
image=localhost/fedpq:kube-cluster
# containerd's defaults, with its root, state, socket, CNI and sandbox image
# its own. restrict_oom_score_adj: the CRI plugin asks runc for an OOM score
# of -998 for every pod's sandbox (and -997 for a Guaranteed pod), and a
# machine that does not let root lower a process's score (a sandboxed VM, a
# rootless or nested runtime; this one) fails every sandbox with "runc
# create failed: ... can't get final child's PID from pipe: EOF": with it,
# scores below containerd's own are raised to it.
containerd config default | sed \
  -e "s|^root = .*|root = \"$work/containerd/root\"|" \
  -e "s|^state = .*|state = \"$work/containerd/state\"|" \
  -e "s|address = \"/run/containerd/containerd.sock\"|address = \"$work/containerd/containerd.sock\"|" \
  -e "s|sandbox_image = .*|sandbox_image = \"$pause_image\"|" \
  -e "s|bin_dir = \"/opt/cni/bin\"|bin_dir = \"$cni_bin\"|" \
  -e "s|conf_dir = \"/etc/cni/net.d\"|conf_dir = \"$work/cni/net.d\"|" \
  -e "s|path = \"/opt/containerd\"|path = \"$work/containerd/opt\"|" \
  -e "s|netns_mounts_under_state_dir = false|netns_mounts_under_state_dir = true|" \
  -e "s|restrict_oom_score_adj = false|restrict_oom_score_adj = true|" > "$work/containerd.toml"
for setting in "root = \"$work/containerd/root\"" "sandbox_image = \"$pause_image\"" "conf_dir = \"$work/cni/net.d\"" \
  "bin_dir = \"$cni_bin\"" "restrict_oom_score_adj = true" "netns_mounts_under_state_dir = true"; do
  grep -qF "$setting" "$work/containerd.toml" || fail "containerd's configuration lacks $setting (containerd config default changed?)"
done
cat > "$work/cni/net.d/10-fedpq.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "fedpq-kube",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$work/cni/ipam", "routes": [{"dst": "0.0.0.0/0"}],
              "ranges": [[{"subnet": "$pod_cidr", "gateway": "$pod_gw"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
start containerd containerd --config "$work/containerd.toml"
until_ok 60 "containerd did not answer on its socket" ctrc version
# The pause image and fedpq's, built with podman and imported.
pctx=$work/images/pause
mkdir -p "$pctx"
(cd "$cp/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$pctx/pause" .)
podman build --quiet -f "$cp/pause/Containerfile" -t $pause_image "$pctx" >/dev/null
podman save --format docker-archive -o "$work/images/pause.tar" $pause_image 2>/dev/null
"$repo/scripts/image.sh" $image
podman save --format docker-archive -o "$work/images/fedpq.tar" $image 2>/dev/null
ctrc images import "$work/images/pause.tar" >/dev/null
ctrc images import "$work/images/fedpq.tar" >/dev/null
# The listing is read whole: grep -q stops at its match, and under pipefail
# the listing's SIGPIPE would fail the check.
images=$(ctrc images ls -q)
grep -qx "$pause_image" <<<"$images" || fail "containerd does not hold $pause_image after the import: $(tr '\n' ' ' <<<"$images")"
grep -qx "$image" <<<"$images" || fail "containerd does not hold $image after the import: $(tr '\n' ' ' <<<"$images")"
say "containerd $(containerd --version | awk '{print $3}') holds $pause_image and $image ($(elapsed))"

# --- the kubelet and kube-proxy -------------------------------------------------------
mkdir -p "$work/kubelet" "$work/pod-logs"
# The node's address: the API server reaches the kubelet there (kubectl logs,
# exec, port-forward), and a kubelet refuses a loopback --node-ip (the node
# then has no address at all, and every kubectl logs fails with "no
# preferred addresses found"). The CNI bridge, made here with its gateway
# address (the bridge plugin takes it as it finds it), gives one that is
# this cluster's own and goes with the bridge at teardown.
ip link add $bridge type bridge
ip addr add $pod_gw/${pod_cidr#*/} dev $bridge
ip link set $bridge up
cat > "$work/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $pod_gw
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$work/containerd/containerd.sock
podLogsDir: $work/pod-logs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
iptables -t mangle -S KUBE-KUBELET-CANARY >/dev/null 2>&1 || kubelet_chains_ours=1
start kubelet "$bin/kubelet" --config "$work/kubelet.yaml" --kubeconfig "$work/kubeconfig" \
  --root-dir "$work/kubelet" --hostname-override $node --node-ip $pod_gw
cat > "$work/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $work/kubeconfig
mode: iptables
hostnameOverride: $node
clusterCIDR: $pod_cidr
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
start kube-proxy "$bin/kube-proxy" --config "$work/kube-proxy.yaml"
until_ok 180 "the node $node did not become Ready" kc wait --for=condition=Ready node/$node --timeout=2s
say "node $node Ready: $(kc get node $node -o jsonpath='{.status.nodeInfo.kubeletVersion} on {.status.nodeInfo.containerRuntimeVersion}, cpu {.status.allocatable.cpu}, memory {.status.allocatable.memory}') ($(elapsed))"
until_ok 60 "kube-proxy's /healthz did not answer" curl -fsS http://127.0.0.1:$proxy_healthz/healthz

kc create namespace $ns >/dev/null
until_ok 60 "the namespace $ns has no default ServiceAccount" kc get serviceaccount default -n $ns
fi

# --- 1. every overlay, server-side, dry run ----------------------------------------------
kc create namespace fedpq-dry-run >/dev/null
dry_failed=0
for d in "$repo/deploy/kubernetes/base" "$repo"/deploy/kubernetes/overlays/*/ ${FEDPQ_KUBE_BASES:-}; do
  d=${d%/}; name=${d#"$repo"/}
  kc kustomize "$d" > "$work/rendered.yaml" 2> "$work/kustomize.err" || { say "$name: kustomize failed: $(cat "$work/kustomize.err")"; dry_failed=1; continue; }
  if out=$(kc apply --server-side --dry-run=server -n fedpq-dry-run -f "$work/rendered.yaml" 2>&1); then
    warnings=$(grep -i '^warning' <<<"$out" | sort -u || true)
    say "$name: accepted ($(grep -c 'serverside-applied' <<<"$out") objects, dry run)${warnings:+; the API server warned:}"
    [ -n "$warnings" ] && sed 's/^/    /' <<<"$warnings"
  else
    say "$name: REJECTED by the API server:"; sed 's/^/    /' <<<"$out"; dry_failed=1
  fi
done
[ $dry_failed = 0 ] || fail "the API server rejected an overlay (above)"
if [ $validate_only = 1 ]; then say "ok: every overlay accepted by kube-apiserver $kube_version, server-side ($(elapsed))"; exit 0; fi

# --- 2. the test overlay, for real -------------------------------------------------------------
(cd "$repo" && go build -o "$work/fedpq" ./cmd/fedpq)
FEDPQ=$work/fedpq "$repo/scripts/kube-secrets.sh" "$work/secrets" 5 $ns >/dev/null
mkdir -p "$work/volumes/fedpq-run"
cat > "$work/pv.yaml" <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: fedpq-run-$node
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  local:
    path: $work/volumes/fedpq-run
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/hostname
          operator: In
          values: [$node]
EOF
kc apply --server-side -f "$work/pv.yaml" >/dev/null
kc apply --server-side -n $ns -f "$work/secrets/secrets.yaml" >/dev/null
kc apply --server-side -n $ns -k "$repo/deploy/kubernetes/overlays/cluster-test" 2>&1 | sed 's/^/  /'
applied=$(date +%s)

jp() { kc get -n $ns "$1" -o jsonpath="$2"; }
pods_of() { kc get pods -n $ns -l "app.kubernetes.io/name=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'; }
cond() { test "$(jp pvc/fedpq-run '{.status.phase}')" = Bound; }; until_ok 60 "the claim fedpq-run was not bound" cond
say "claim fedpq-run Bound to $(jp pvc/fedpq-run '{.spec.volumeName}') ($(jp pvc/fedpq-run '{.status.capacity.storage}'), $(jp pvc/fedpq-run '{.spec.accessModes[0]}'))"
cond() { test -n "$(pods_of fedpq-server)"; }; until_ok 120 "the Deployment's pod did not start" cond
server_pod=$(pods_of fedpq-server)
rs=$(kc get pod -n $ns "$server_pod" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')
[ "$(jp "$rs" '{.metadata.ownerReferences[0].name}')" = fedpq-server ] || fail "the server pod's $rs is not owned by the Deployment fedpq-server"
say "Deployment fedpq-server -> $rs -> pod $server_pod (strategy $(jp deploy/fedpq-server '{.spec.strategy.type}'))"
cond() { test "$(pods_of fedpq-client | wc -l)" = 2; }; until_ok 120 "the Job made no 2 pods" cond
indices=""
for p in $(pods_of fedpq-client); do
  i=$(kc get pod -n $ns "$p" -o jsonpath='{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}')
  env_i=$(kc get pod -n $ns "$p" -o jsonpath='{.spec.containers[0].env[?(@.name=="JOB_COMPLETION_INDEX")].valueFrom.fieldRef.fieldPath}')
  [ -n "$env_i" ] || fail "pod $p has no JOB_COMPLETION_INDEX from the downward API"
  say "Job pod $p: index $i, hostname $(kc get pod -n $ns "$p" -o jsonpath='{.spec.hostname}'), JOB_COMPLETION_INDEX from $env_i"
  indices="$indices $i"
done
[ "$(tr ' ' '\n' <<<"$indices" | sort -n | tr '\n' ' ' | xargs)" = "0 1" ] || fail "the Job's pods have indices$indices, want 0 and 1"
policy=$(jp job/fedpq-clients '{.spec.template.spec.restartPolicy}')
say "Job fedpq-clients: completionMode $(jp job/fedpq-clients '{.spec.completionMode}'), completions $(jp job/fedpq-clients '{.spec.completions}'), parallelism $(jp job/fedpq-clients '{.spec.parallelism}'), backoffLimitPerIndex $(jp job/fedpq-clients '{.spec.backoffLimitPerIndex}'), backoffLimit $(jp job/fedpq-clients '{.spec.backoffLimit}') (as stored), restartPolicy $policy"
until_ok 180 "the server pod was not Ready" kc wait -n $ns --for=condition=Ready "pod/$server_pod" --timeout=2s
server_ip=$(kc get pod -n $ns "$server_pod" -o jsonpath='{.status.podIP}')
say "server pod Ready at $server_ip $(( $(date +%s) - applied )) s after the apply; Service fedpq-server: ClusterIP $(jp svc/fedpq-server '{.spec.clusterIP}')"
ready_endpoints() { kc get endpointslices -n $ns -l kubernetes.io/service-name=fedpq-server -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{" "}{end}'; }
cond() { grep -q "$server_ip" <<<"$(ready_endpoints)"; }; until_ok 30 "the Service's EndpointSlice does not hold the ready server pod" cond
say "EndpointSlice of fedpq-server: ready endpoints $(ready_endpoints)"
# The disruption controller counts the clients' budget against the Job's pods
# (an integer minAvailable: a Job has no scale subresource).
cond() { test "$(jp pdb/fedpq-clients '{.status.expectedPods}')" = 2; }; until_ok 60 "the disruption controller did not count the Job's 2 pods for the budget fedpq-clients" cond
say "PodDisruptionBudgets: fedpq-server minAvailable $(jp pdb/fedpq-server '{.spec.minAvailable}'), $(jp pdb/fedpq-server '{.status.currentHealthy}') healthy, $(jp pdb/fedpq-server '{.status.disruptionsAllowed}') disruptions allowed; fedpq-clients minAvailable $(jp pdb/fedpq-clients '{.spec.minAvailable}') of $(jp pdb/fedpq-clients '{.status.expectedPods}') expected"

# --- 3. the run ------------------------------------------------------------------------------------
rounds=$(awk '$1 == "rounds:" { print $2 }' "$repo/deploy/kubernetes/overlays/cluster-test/run.yaml")
clients=$(awk '$1 == "clients:" { print $2 }' "$repo/deploy/kubernetes/overlays/cluster-test/run.yaml")
logs_of() { kc logs -n $ns "$@" 2>/dev/null || true; }
cond() { grep -q "round 2 done" <<<"$(logs_of "$server_pod")"; }; until_ok 300 "the server did not finish round 2 in 5 minutes" cond
http() { curl -s -o /dev/null -w '%{http_code}' "http://$1:9090/$2"; }
[ "$(http $cluster_ip healthz)" = 200 ] || fail "/healthz through the ClusterIP answered $(http $cluster_ip healthz)"
[ "$(http $cluster_ip readyz)" = 200 ] || fail "/readyz through the ClusterIP answered $(http $cluster_ip readyz)"
done_now=$(curl -fsS "http://$cluster_ip:9090/metrics" | awk '$1 == "fedpq_server_rounds_done" { print int($2) }')
say "round 2 done; through the ClusterIP $cluster_ip (kube-proxy): /healthz 200, /readyz 200, fedpq_server_rounds_done $done_now"
# The live page, as an operator sees it from outside the cluster: kubectl
# port-forward (the API server, the kubelet's streaming server, containerd).
kc port-forward -n $ns deploy/fedpq-server $forward_port:9090 > "$work/logs/port-forward.log" 2>&1 &
forward=$!
cond() { curl -fsS http://127.0.0.1:$forward_port/healthz; }; until_ok 30 "kubectl port-forward to the server's metrics port did not answer" cond
page_title=$(curl -fsS http://127.0.0.1:$forward_port/ | sed -n 's:.*<title>\(.*\)</title>.*:\1:p')
forward_metrics=$(curl -fsS http://127.0.0.1:$forward_port/metrics | grep -c '^fedpq_' || true)
kill $forward 2>/dev/null; wait $forward 2>/dev/null || true
[ -n "$page_title" ] || fail "the live page through kubectl port-forward has no title"
say "kubectl port-forward deploy/fedpq-server $forward_port:9090: http://127.0.0.1:$forward_port/ is the live page \"$page_title\"; /metrics $forward_metrics fedpq_ samples"

# 3a. The server's process killed: the kubelet restarts the container in the same pod.
cid=$(kc get pod -n $ns "$server_pod" -o jsonpath='{.status.containerStatuses[0].containerID}'); cid=${cid#containerd://}
ctrc tasks kill -s SIGKILL "$cid" >/dev/null
cond() { test "$(kc get pod -n $ns "$server_pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')" -ge 1; }; until_ok 120 "the kubelet did not restart the killed server container" cond
last=$(kc get pod -n $ns "$server_pod" -o jsonpath='{.status.containerStatuses[0].lastState.terminated.exitCode} {.status.containerStatuses[0].lastState.terminated.reason}')
killed_at=$(logs_of "$server_pod" --previous | sed -n 's/.*round \([0-9]*\) done.*/\1/p' | tail -n 1)
cond() { grep -q "resuming .* after round" <<<"$(logs_of "$server_pod")"; }; until_ok 120 "the restarted server did not resume" cond
resumed=$(logs_of "$server_pod" | grep -m1 "resuming .* after round")
say "server process killed (SIGKILL) after round $killed_at: container exit $last, restarted by the kubelet (restartCount $(kc get pod -n $ns "$server_pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')): ${resumed#fedpq server: }"
grep -q "after round $killed_at " <<<"$resumed" || fail "the restarted server resumed elsewhere than after round $killed_at (its last checkpointed round)"
until_ok 180 "the restarted server pod was not Ready again" kc wait -n $ns --for=condition=Ready "pod/$server_pod" --timeout=2s

# 3b. A client pod's process killed: the Job retries its index.
c1=$(kc get pods -n $ns -l app.kubernetes.io/name=fedpq-client -o jsonpath='{range .items[?(@.metadata.annotations.batch\.kubernetes\.io/job-completion-index=="1")]}{.metadata.name}{end}')
ccid=$(kc get pod -n $ns "$c1" -o jsonpath='{.status.containerStatuses[0].containerID}'); ccid=${ccid#containerd://}
ctrc tasks kill -s SIGKILL "$ccid" >/dev/null
if [ "$policy" = Never ]; then
  others_of_1() { kc get pods -n $ns -l app.kubernetes.io/name=fedpq-client,batch.kubernetes.io/job-completion-index=1 -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vx "$c1"; }
  cond() { test "$(kc get pod -n $ns "$c1" -o jsonpath='{.status.phase}')" = Failed && test -n "$(others_of_1)"; }; until_ok 120 "the killed pod $c1 did not fail, or the Job did not replace it with another pod of index 1" cond
  c1new=$(others_of_1 | head -n 1)
  count=$(kc get pod -n $ns "$c1new" -o jsonpath='{.metadata.annotations.batch\.kubernetes\.io/job-index-failure-count}')
  [ "$count" = 1 ] || fail "the new pod $c1new of index 1 has a failure count of '$count', want 1 (the killed pod's failure counted against its index)"
  say "client pod $c1 (index 1) killed: Failed (exit $(kc get pod -n $ns "$c1" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')); the Job made $c1new for index 1 (failure count $count of backoffLimitPerIndex $(jp job/fedpq-clients '{.spec.backoffLimitPerIndex}'))"
else
  cond() { test "$(kc get pod -n $ns "$c1" -o jsonpath='{.status.containerStatuses[0].restartCount}')" -ge 1; }; until_ok 120 "the kubelet did not restart the killed client container" cond
  say "client pod $c1 (index 1) killed: restartPolicy $policy, the kubelet restarted its container (restartCount $(kc get pod -n $ns "$c1" -o jsonpath='{.status.containerStatuses[0].restartCount}'), last exit $(kc get pod -n $ns "$c1" -o jsonpath='{.status.containerStatuses[0].lastState.terminated.exitCode}'))"
fi

# 3c. The server pod deleted (SIGTERM): the Deployment makes another, which resumes.
logs_of "$server_pod" > "$work/server-1.log"
kc logs -n $ns -f "$server_pod" > "$work/server-1-follow.log" 2>&1 &
follow=$!
cond() { test "$(logs_of "$server_pod" | grep -c ' done: ')" -ge 1; }; until_ok 300 "the server did not finish another round after the restart" cond
kc delete pod -n $ns "$server_pod" --wait=true --timeout=120s >/dev/null
wait $follow 2>/dev/null || true
stopped_line=$(grep -m1 "told to stop: stopping after round" "$work/server-1-follow.log" || true)
[ -n "$stopped_line" ] || fail "the deleted server pod did not say where it stopped (log: $(tail -n 3 "$work/server-1-follow.log"))"
stopped_at=$(sed -n 's/.*stopping after round \([0-9]*\) of.*/\1/p' <<<"$stopped_line")
cond() { test -n "$(pods_of fedpq-server | grep -v "^$server_pod\$")"; }; until_ok 120 "the Deployment did not make a new server pod" cond
server_pod2=$(pods_of fedpq-server | grep -v "^$server_pod\$" | head -n 1)
cond() { grep -q "resuming .* after round $stopped_at " <<<"$(logs_of "$server_pod2")"; }; until_ok 180 "the new server pod did not resume" cond
say "server pod $server_pod deleted after round $stopped_at (SIGTERM: ${stopped_line#*told to stop: }); the Deployment made $server_pod2: $(logs_of "$server_pod2" | grep -m1 resuming | sed 's/^fedpq server: //')"

# 3d. The end of the run.
cond() { grep -q "run finished after $rounds rounds" <<<"$(logs_of "$server_pod2")"; }; until_ok 600 "the run did not finish in 10 minutes" cond
until_ok 180 "the Job did not complete" kc wait -n $ns --for=condition=Complete job/fedpq-clients --timeout=2s
runlog=$work/volumes/fedpq-run/run/metrics.jsonl
[ -f "$runlog" ] || fail "no metrics.jsonl on the volume ($runlog)"
distinct=$(grep -o '"round":[0-9]*' "$runlog" | sort -u | wc -l)
full=$(grep -o '"round":[0-9]*,.*"clients":[0-9]*,"dropped":0' "$runlog" | grep -c "\"clients\":$clients,\"dropped\":0" || true)
[ "$distinct" = $rounds ] || fail "metrics.jsonl holds $distinct distinct rounds, want $rounds"
say "run finished: metrics.jsonl on the claim's volume holds rounds 1-$rounds ($(wc -l < "$runlog") lines; $full with all $clients uploads); owner of the run directory $(stat -c %u:%g "$work/volumes/fedpq-run/run"), volume $(stat -c '%U:%g %A' "$work/volumes/fedpq-run")"
[ "$(jp job/fedpq-clients '{.status.completedIndexes}')" = 0,1 ] || fail "the Job's completed indexes are '$(jp job/fedpq-clients '{.status.completedIndexes}')', want 0,1"
[ "$(jp job/fedpq-clients '{.status.failed}')" = 1 ] || fail "the Job counts $(jp job/fedpq-clients '{.status.failed}') failed pods, want 1 (the client pod killed)"
say "Job fedpq-clients Complete: succeeded $(jp job/fedpq-clients '{.status.succeeded}'), failed $(jp job/fedpq-clients '{.status.failed}'), completed indexes $(jp job/fedpq-clients '{.status.completedIndexes}'), failed indexes '$(jp job/fedpq-clients '{.status.failedIndexes}')'"
for p in $(pods_of fedpq-client); do
  say "  pod $p (index $(kc get pod -n $ns "$p" -o jsonpath='{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}')): $(kc get pod -n $ns "$p" -o jsonpath='{.status.phase}, exit {.status.containerStatuses[0].state.terminated.exitCode}, restarts {.status.containerStatuses[0].restartCount}'); $(logs_of "$p" | grep -m1 -o 'fedpq fleet [0-9-]*'): $(logs_of "$p" | grep -m1 -o 'run finished after [0-9]* rounds.*' || echo 'no run finished line')"
done

# 3e. The finished server lingers: live (no restart by liveness), not ready, out of the endpoints.
restarts=$(kc get pod -n $ns "$server_pod2" -o jsonpath='{.status.containerStatuses[0].restartCount}')
cond() { test "$(kc get pod -n $ns "$server_pod2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False; }; until_ok 60 "the finished server pod stayed Ready" cond
cond() { test -z "$(ready_endpoints)"; }; until_ok 30 "the Service's EndpointSlice still lists the finished server as ready" cond
sleep 35 # three liveness periods of 10 s
[ "$(kc get pod -n $ns "$server_pod2" -o jsonpath='{.status.phase}')" = Running ] || fail "the finished server pod is not Running"
[ "$(kc get pod -n $ns "$server_pod2" -o jsonpath='{.status.containerStatuses[0].restartCount}')" = "$restarts" ] || fail "the liveness probe restarted the lingering server"
ip2=$(kc get pod -n $ns "$server_pod2" -o jsonpath='{.status.podIP}')
say "the finished server lingers: pod Running, Ready False (/readyz $(http "$ip2" readyz)), /healthz $(http "$ip2" healthz), no restart in 35 s, no ready endpoint behind the Service; Deployment $(ready=$(jp deploy/fedpq-server '{.status.readyReplicas}'); echo "${ready:-0}")/$(jp deploy/fedpq-server '{.spec.replicas}') ready"
grep -E "stopping after|resuming" "$work/server-1-follow.log" | sed 's/^/  /'
kc logs -n $ns deploy/fedpq-server | grep -E "resuming|run finished|staying up" | sed 's/^/  /'
kc get events -n $ns --field-selector type=Warning -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message --no-headers 2>/dev/null | awk '$1 != "MissingClusterDNS"' | sed 's/^/  warning event: /' | head -20
say "  (and $(kc get events -n $ns --field-selector type=Warning,reason=MissingClusterDNS --no-headers 2>/dev/null | wc -l) MissingClusterDNS warnings, one a pod: this cluster has no DNS server)"

# --- 4. the chart, installed --------------------------------------------------------------------
# helm install of deploy/helm/fedpq in a second namespace, with the values
# that render overlays/cluster-test (helm-test.sh checks that they do), its
# own ClusterIP and names, a short run; the run to its end; helm uninstall.
helm=${FEDPQ_HELM:-${XDG_CACHE_HOME:-$HOME/.cache}/fedpq/helm-v3.22.0/helm}
if [ -x "$helm" ]; then
  helm_ip=10.96.0.71
  kc create namespace $helm_ns >/dev/null
  FEDPQ=$work/fedpq "$repo/scripts/kube-secrets.sh" "$work/secrets-helm" $clients $helm_ns >/dev/null
  kc apply --server-side -n $helm_ns -f "$work/secrets-helm/secrets.yaml" >/dev/null
  mkdir -p "$work/volumes/fedpq-helm-run"
  sed -e "s|name: fedpq-run-$node|name: fedpq-helm-run-$node|" -e "s|path: $work/volumes/fedpq-run|path: $work/volumes/fedpq-helm-run|" \
    -e "s|^  capacity:|  claimRef:\n    namespace: $helm_ns\n    name: fedpq-run\n  capacity:|" "$work/pv.yaml" > "$work/pv-helm.yaml"
  kc apply --server-side -f "$work/pv-helm.yaml" >/dev/null
  sed -e "s/$cluster_ip/$helm_ip/" -e "s/fedpq-server\.$ns/fedpq-server.$helm_ns/" "$repo/deploy/kubernetes/overlays/cluster-test/helm-values.yaml" > "$work/helm-values.yaml"
  sed -e 's/^name: .*/name: cluster-helm/' -e 's/^rounds: .*/rounds: 3/' -e 's/^epochs: .*/epochs: 300/' "$repo/deploy/kubernetes/overlays/cluster-test/run.yaml" > "$work/helm-run.yaml"
  hc() { KUBECONFIG=$work/kubeconfig "$helm" "$@"; }
  hc install fedpq "$repo/deploy/helm/fedpq" -n $helm_ns -f "$work/helm-values.yaml" --set-file run="$work/helm-run.yaml" 2>&1 | sed 's/^/  /'
  until_ok 180 "the chart's Job did not complete" kc wait -n $helm_ns --for=condition=Complete job/fedpq-clients --timeout=2s
  hpod=$(kc get pods -n $helm_ns -l app.kubernetes.io/name=fedpq-server -o jsonpath='{.items[0].metadata.name}')
  cond() { grep -q "run finished after 3 rounds" <<<"$(kc logs -n $helm_ns "$hpod" 2>/dev/null)"; }; until_ok 30 "the chart's server did not finish its 3 rounds" cond
  hc list -n $helm_ns 2>&1 | sed 's/^/  /'
  kc get pods -n $helm_ns -o wide 2>&1 | sed 's/^/  /'
  say "helm install fedpq deploy/helm/fedpq -n $helm_ns: $(kc logs -n $helm_ns "$hpod" | grep -m1 -o 'run finished after 3 rounds'), Job Complete ($(kc get job -n $helm_ns fedpq-clients -o jsonpath='{.status.succeeded}') pods succeeded), ClusterIP $(kc get svc -n $helm_ns fedpq-server -o jsonpath='{.spec.clusterIP}'), claim Bound to $(kc get pvc -n $helm_ns fedpq-run -o jsonpath='{.spec.volumeName}')"
  hc uninstall fedpq -n $helm_ns --wait --timeout 120s 2>&1 | sed 's/^/  /'
  cond() { test -z "$(kc get pods,pvc,deploy,job,svc -n $helm_ns -o name 2>/dev/null)"; }; until_ok 120 "helm uninstall left a pod, claim, Deployment, Job or Service in $helm_ns" cond
  say "helm uninstall fedpq: no pod, claim, Deployment, Job or Service left in $helm_ns; the volume $(kc get pv fedpq-helm-run-$node -o jsonpath='{.status.phase}') (Retain)"
else
  say "the chart is not installed: no helm at $helm (scripts/helm-test.sh builds it)"
fi
say "ok: a real control plane ($(elapsed) in all): every overlay accepted server-side, the claim bound, the Deployment's pod and the Job's pods 0 and 1, the run through the ClusterIP, the server killed (restarted in place, resumed after round $killed_at) and deleted (rescheduled, resumed after round $stopped_at), client index 1 retried, $rounds rounds, the Job Complete, the finished server out of the endpoints; the live page through kubectl port-forward${hpod:+; the chart installed, its run to the end, uninstalled}"
