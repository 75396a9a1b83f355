#!/usr/bin/env bash
# Applies, one at a time, each change to package secagg that breaks the
# protocol's privacy, runs the package's tests, and prints the tests that
# fail: each mutation must make at least one fail. The working tree's
# secagg/ is restored after each (it must have no uncommitted change).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! git diff --quiet -- secagg/; then
  echo "secagg/ has uncommitted changes; commit or stash them first" >&2; exit 2
fi
mutate() { # name, file, python expression old -> new
  local name=$1 file=$2 old=$3 new=$4
  python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
s = open(path).read()
if old not in s:
    sys.exit("mutation does not apply: " + old)
open(path, "w").write(s.replace(old, new))
PY
  [ $? -eq 0 ] || { git checkout -q -- secagg/; echo "$name: DID NOT APPLY"; status=1; return; }
  local failed
  failed=$(go test -count=1 ./secagg/ 2>&1 | grep -E '^\s*--- FAIL' | sed -E 's/^\s*--- FAIL: ([^ ]+).*/\1/' | paste -sd' ')
  git checkout -q -- secagg/
  if [ -z "$failed" ]; then echo "$name: NOT CAUGHT"; status=1; else echo "$name: caught by $failed"; fi
}
status=0
mutate "pairwise masks removed on both sides" secagg/client.go \
  'corr.NewStream(pairKey(cl.p, cl.peers[j], cl.s, cl.id, j)).Fill(buf)
		if cl.id < j {' 'corr.NewStream(pairKey(cl.p, cl.peers[j], cl.s, cl.id, j)).Fill(buf)
		clear(buf)
		if cl.id < j {'
mutate "self masks removed on both sides" secagg/client.go \
  'corr.NewStream(selfKey(cl.p, cl.b, cl.id)).Fill(buf)
	add(y, buf)' 'corr.NewStream(selfKey(cl.p, cl.b, cl.id)).Fill(buf)
	clear(buf)
	add(y, buf)'
mutate "sealing key not derived from the X25519 agreement" secagg/client.go \
  'return kdf(secret, p.Seed, "share", p.Round, from, to)' 'return kdf(nil, p.Seed, "share", p.Round, from, to)'
mutate "seed and round dropped from the mask keys" secagg/client.go \
  'return kdf(scalarBytesOf(b), p.Seed, "self mask", p.Round, id)' 'return kdf(scalarBytesOf(b), [32]byte{}, "self mask", id)'
mutate "seed and round dropped from the pair-mask key" secagg/client.go \
  'return kdf(shared, p.Seed, "pair mask", p.Round, min(i, j), max(i, j))' 'return kdf(shared, [32]byte{}, "pair mask", min(i, j), max(i, j))'
mutate "threshold check in masking removed" secagg/client.go \
  'if len(partners)+1 < cl.threshold {' 'if false {'
mutate "shares at x = index instead of index + 1" secagg/graph.go \
  'x[h] = uint64(k + 1)' 'x[h] = uint64(k)'
mutate "consent without the connectivity check" secagg/client.go \
  'if !cl.g.connected(r.Survivors) {' 'if false {'
mutate "unmask without enough consents" secagg/client.go \
  'if n < cl.threshold {
		return Reveal{}, fmt.Errorf("secagg: client %d: refused to unmask' 'if false {
		return Reveal{}, fmt.Errorf("secagg: client %d: refused to unmask'
mutate "holder does not check its shares" secagg/client.go \
  'if err != nil || !grp.NewElement().MulGen(v).IsEqual(want) {' 'if err != nil {'
mutate "server does not check a dealer's values" secagg/server.go \
  'if !ok {
		return fmt.Errorf("secagg: client %d'"'"'s commitments are not of polynomials' 'if false {
		return fmt.Errorf("secagg: client %d'"'"'s commitments are not of polynomials'
exit $status
