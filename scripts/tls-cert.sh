#!/usr/bin/env bash
# Makes a CA and a server certificate signed by it, valid for the names
# given (DNS names or IP addresses), for fedpq server --tls-cert/--tls-key and
# fedpq client --tls-ca:
#   scripts/tls-cert.sh DIR NAME...   writes DIR/ca.crt, DIR/server.crt, DIR/server.key
# On a cluster the names are the Service's DNS names (fedpq-server,
# fedpq-server.NAMESPACE.svc, ...): a client checks the name it dials against
# them. The key is left readable by the container's user (65532), as a
# mounted Secret is; keep DIR private.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR NAME..." >&2; exit 2; }
dir=$1; shift
command -v openssl >/dev/null || { echo "tls-cert.sh: openssl is not installed" >&2; exit 1; }
san=""
for n in "$@"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="${san:+,}IP:$n"; else san+="${san:+,}DNS:$n"; fi
done
mkdir -p "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 -subj /CN=fedpq-ca \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
  -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 365 \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san") -out "$dir/server.crt" 2>/dev/null
rm -f "$dir/server.csr" "$dir/ca.srl"
chmod 755 "$dir"; chmod 644 "$dir/server.key" "$dir/server.crt" "$dir/ca.crt"; chmod 600 "$dir/ca.key"
echo "$dir/server.crt: $san"
