#!/usr/bin/env bash
# Fuzzes every Fuzz target of the module for a set time each (default 60s):
#   scripts/fuzz.sh            # every target, 60 s each
#   scripts/fuzz.sh 10m        # every target, 10 minutes each
#   scripts/fuzz.sh 30s Float  # the targets whose name matches Float
# The default test suite runs only each target's seed corpus; this script
# searches beyond it. A failure stops the script and leaves the input that
# caused it under the package's testdata/fuzz/, which then becomes a seed.
# New inputs are minimized for at most 10 s, so that large seeds (whole
# uploads) do not stall the search.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-60s}
match=${2:-.}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r target; do
    [[ $target =~ $match ]] || continue
    echo "== $pkg $target ($time)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$time" -fuzzminimizetime 10s
  done
done
