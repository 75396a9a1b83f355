#!/usr/bin/env bash
# Applies, one at a time, each change to package secagg (or to the client
# in transport) that breaks the protocol's privacy or robustness, runs the
# package's tests, and prints the top-level tests that fail: each mutation
# must make at least one fail. The package is restored after each (secagg/
# and transport/ must have no uncommitted change). 25 minutes on 2
# cores.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! git diff --quiet -- secagg/ transport/; then
  echo "secagg/ or transport/ has uncommitted changes; commit or stash them first" >&2; exit 2
fi
status=0
ok=1
# apply FILE OLD NEW: one edit of the mutation under way.
apply() {
  python3 - "$1" "$2" "$3" <<'PY' || ok=0
import sys
path, old, new = sys.argv[1:]
s = open(path).read()
if old not in s:
    sys.exit("does not apply to %s: %r" % (path, old))
open(path, "w").write(s.replace(old, new, 1))
PY
}
# check NAME [PKG [RUN]]: runs the tests of PKG (secagg by default; those
# matching RUN, if given) on the edits applied, restores PKG/.
check() {
  local out failed pkg=${2:-secagg}
  if [ $ok = 0 ]; then echo "$1: DID NOT APPLY"; status=1
  elif ! go vet "./$pkg/" >/dev/null 2>&1; then echo "$1: DOES NOT COMPILE"; status=1
  else
    out=$(go test -count=1 "./$pkg/" -run "${3:-.}" 2>&1)
    failed=$(echo "$out" | grep -E '^--- FAIL' | sed -E 's/^--- FAIL: ([^ ]+).*/\1/' | paste -sd' ')
    if [ -z "$failed" ]; then echo "$1: NOT CAUGHT"; status=1; else echo "$1: caught by $failed"; fi
  fi
  git checkout -q -- "$pkg/"
  ok=1
}

apply secagg/client.go 'corr.NewStream(pairKey(cl.p, cl.peers[j], cl.s, cl.id, j)).Fill(buf)' 'clear(buf)'
apply secagg/server.go 'corr.NewStream(pairKey(s.p, s.sKeys[i], sj, i, j)).Fill(buf)' 'clear(buf); _ = sj'
check "pairwise masks removed on both sides"

apply secagg/client.go 'corr.NewStream(selfKey(cl.p, cl.b, cl.id)).Fill(buf)' 'clear(buf)'
apply secagg/server.go 'corr.NewStream(selfKey(s.p, b, i)).Fill(buf)' 'clear(buf); _ = b'
check "self masks removed on both sides"

apply secagg/client.go 'return kdf(secret, p.Seed, "share", p.Round, from, to)' 'return kdf(nil, p.Seed, "share", p.Round, from, to)'
check "sealing key not derived from the X25519 agreement"

apply secagg/client.go 'return kdf(scalarBytesOf(b), p.Seed, "self mask", p.Round, id)' 'return kdf(scalarBytesOf(b), [32]byte{}, "self mask", id)'
apply secagg/client.go 'return kdf(shared, p.Seed, "pair mask", p.Round, min(i, j), max(i, j))' 'return kdf(shared, [32]byte{}, "pair mask", min(i, j), max(i, j))'
check "seed and round dropped from the mask keys"

apply secagg/client.go 'if len(partners)+1 < cl.threshold {' 'if false {'
check "threshold check in masking removed"

apply secagg/graph.go 'x[h] = uint64(k + 1)' 'x[h] = uint64(k)'
check "shares at x = index instead of index + 1"

apply secagg/client.go 'if !cl.g.connected(r.Survivors) {' 'if false {'
check "consent without the connectivity check"

apply secagg/client.go 'if n := cl.g.consents(cl.id, agreed); n < cl.threshold {' 'if n := cl.g.consents(cl.id, agreed); false {'
check "unmask with fewer than t consents"

apply secagg/client.go 'if msm(points, weights).IsEqual(grp.NewElement().MulGen(sum)) {' 'if true {'
check "a holder does not check its shares"

apply secagg/client.go '			if !grp.NewElement().MulGen(o.shares[k]).IsEqual(o.values[k]) {' '			if k < 0 && !grp.NewElement().MulGen(o.shares[k]).IsEqual(o.values[k]) {'
check "a holder does not find which shares are wrong"

apply secagg/server.go '	if !ok {
		return fmt.Errorf("secagg: client %d'"'"'s commitments are not of polynomials' '	if !ok && false {
		return fmt.Errorf("secagg: client %d'"'"'s commitments are not of polynomials'
check "the server does not check a dealer's values"

apply secagg/vss.go 'return grp.NewElement().MulGen(set[0].v).IsEqual(value(set[0].x)), nil' 'return set[0].v != nil, nil'
apply secagg/vss.go 'return msm(points, weights).IsEqual(grp.NewElement().MulGen(sum)), nil' 'return points != nil, nil'
check "the server does not check revealed shares"

apply secagg/params.go 'return max(2, c+2, (degree+1+c)/2+1)' 'return max(2, c+2)'
check "threshold not above half the holders"

apply secagg/client.go '	for _, j := range cl.partners {
		if alive[j] {' '	for j := range cl.peers {
		if alive[j] {'
check "consent counting neighbours, not partners (issue 30's attack)"

apply secagg/client.go 'if sh, ok := cl.held[j]; ok && certified(j) {' 'if sh, ok := cl.held[j]; ok {'
check "a self-mask share revealed without its owner's holders' consents"

apply secagg/client.go 'ok && certified(j) && all(cl.g.neighbours(j), certified) {' 'ok && certified(j) {'
check "a mask-key share revealed without the consents of its owner's neighbours' holders"

apply secagg/server.go 'if s.kept[j] && s.disclosed[j] == nil {' 'if false {'
check "a disputed dealing kept without disclosure (its dealer's own share makes the threshold)"

apply secagg/server.go 'if _, ok := s.keys[j]; ok && d.Sealed[j] == nil {' 'if false {'
check "a dealing that leaves holders out kept (its dealer's own share makes the threshold)"

apply secagg/server.go 'if !grp.NewElement().MulGen(v).IsEqual(vs.element(at)) {' 'if false && !grp.NewElement().MulGen(v).IsEqual(vs.element(at)) {'
check "disclosed shares not checked against the commitments"

apply secagg/client.go 'if len(complainers) > limit {' 'if false {'
check "a dealer discloses to any number of complainers"

apply transport/client.go 'if id := runID([]byte(hello.GetConfigYaml())); !bytes.Equal(hello.GetRunId(), id) {' 'if id := runID([]byte(hello.GetConfigYaml())); false {'
check "the run id unchecked" transport '^(TestClientPolicy|TestAskedAgain|TestReplayNewRunID)$'

apply transport/secureclient.go 'secaggShareSigned(sr.runID, t, sh, sh.GetValues()), sh.GetSignature()); err != nil {' 'secaggShareSigned(sr.runID, t, sh, sh.GetValues()), sh.GetSignature()); false && err != nil {'
check "a holder complains of a dealing its dealer did not sign" transport '^TestTamperingServer$'

apply transport/secureclient.go 'check.GetSignature()); err != nil || check.GetRound() != t' 'check.GetSignature()); false && err != nil || check.GetRound() != t'
check "a dealer discloses for a complaint its holder did not sign" transport '^TestTamperingServer$'

exit $status
