#!/usr/bin/env bash
# Makes what the Kubernetes base (deploy/kubernetes/base) expects in Secrets,
# and the Secrets themselves:
#   scripts/kube-secrets.sh DIR N [NAMESPACE [NAMES]]
# writes DIR/token (the join token), DIR/tls/ (fedpq cert: ca.pem, and
# server.pem and server.key for the Service's names: fedpq-server,
# fedpq-server.NAMESPACE, fedpq-server.NAMESPACE.svc,
# fedpq-server.NAMESPACE.svc.cluster.local, and NAMES, comma-separated names
# or addresses by which clients outside the cluster dial it, such as a load
# balancer's: overlays/external), DIR/keys/client-K-of-N.key for
# K < N (fedpq keygen; the names a fleet's clients look for in their --key
# directory) with their roster DIR/roster.txt, and DIR/secrets.yaml: the
# Secrets fedpq-token, fedpq-tls (tls.crt, tls.key and ca.crt, the keys
# Kubernetes' TLS Secrets and cert-manager use), fedpq-roster and
# fedpq-client-keys (kubectl apply -f DIR/secrets.yaml -n NAMESPACE). FEDPQ
# names the fedpq binary (default: fedpq on PATH). With FEDPQ_OWN_DATA=1 the
# keys are named client-K.key, the names clients that bring their own data
# (--data, overlays/client-data) look for. Keep DIR private: it holds every
# client's key.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR N [NAMESPACE [NAMES]]" >&2; exit 2; }
dir=$1; n=$2; ns=${3:-default}; extra=${4:+,$4}
fedpq=${FEDPQ:-fedpq}
command -v kubectl >/dev/null || { echo "kube-secrets.sh: kubectl is not installed (apt-get install kubernetes-client)" >&2; exit 1; }
mkdir -p "$dir/keys"
(umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' > "$dir/token")
rm -f "$dir/tls/ca.pem" "$dir/tls/server.pem" "$dir/tls/server.key" # made anew, as the keys and the token
"$fedpq" cert --names "fedpq-server,fedpq-server.$ns,fedpq-server.$ns.svc,fedpq-server.$ns.svc.cluster.local$extra" --out "$dir/tls" >/dev/null
: > "$dir/roster.txt"
rm -f "$dir"/keys/client-*.key
for k in $(seq 0 $((n - 1))); do
  key=$dir/keys/client-$k-of-$n.key
  [ "${FEDPQ_OWN_DATA:-}" = 1 ] && key=$dir/keys/client-$k.key
  "$fedpq" keygen --client "$k" --key "$key" >> "$dir/roster.txt"
done
secret() { kubectl create secret generic "$@" --dry-run=client -o yaml; }
{
  secret fedpq-token --from-file=token="$dir/token"
  echo ---
  secret fedpq-tls --from-file=tls.crt="$dir/tls/server.pem" --from-file=tls.key="$dir/tls/server.key" --from-file=ca.crt="$dir/tls/ca.pem"
  echo ---
  secret fedpq-roster --from-file=roster.txt="$dir/roster.txt"
  echo ---
  secret fedpq-client-keys --from-file="$dir/keys"
} > "$dir/secrets.yaml"
echo "$dir/secrets.yaml: fedpq-token, fedpq-tls (for fedpq-server.$ns.svc$extra), fedpq-roster and fedpq-client-keys ($n clients)"
