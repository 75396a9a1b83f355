#!/usr/bin/env bash
# The monitoring test (docs/cluster.md#monitoring): Debian's Prometheus
# scraping live fedpq runs on loopback, every alert of
# deploy/prometheus/fedpq-rules.yml firing in a run made to trip it, every
# query of deploy/grafana/fedpq-dashboard.json returning data, and the
# server's live page rendered by headless Chromium mid-run.
#   1. promtool check config and rules, promtool test rules on recorded
#      series, the PrometheusRule of deploy/kubernetes/monitoring the same
#      groups as the rules file, the dashboard valid JSON.
#   2. Four runs at once, each a fedpq server and client processes with
#      --metrics, scraped every second (rules evaluated every second, their
#      `for:` set to 0 so that a run of seconds can trip them; the
#      expressions are the file's):
#      dp       DP-FedAvg with a budget (target epsilon 1), 8 rounds, 3
#               clients, and 20 clients with a wrong token: trips
#               FedpqPrivacyBudgetNearTarget and FedpqRefusalsSpiking;
#      frozen   ldpq, 3 clients, rounds of 2 s, client 2 frozen (SIGSTOP):
#               FedpqUploadsMissing; then it is let go (its late upload is
#               refused) and every client killed: FedpqRoundStalled and
#               FedpqTargetDown;
#      starved  a fleet of 16 clients with one CPU thread (GOMAXPROCS=1,
#               what a CPU limit of one core gives Go) and 4 trainers:
#               FedpqFleetCPUStarved.
#   3. The dashboard's 19 queries against that Prometheus, each non-empty.
#   4. Chromium's screenshot and DOM of the dp run's page mid-run.
# Without prometheus, promtool, chromium or curl it prints that it skipped
# and exits 0; with CI set it fails instead.
#   scripts/monitoring-test.sh                       (CI: .ci/run calls it)
#   SCREENSHOT=docs/images/live-page.png scripts/monitoring-test.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
for tool in prometheus promtool chromium curl python3; do
  if ! command -v "$tool" >/dev/null; then
    if [ -n "${CI:-}" ]; then
      echo "monitoring test: FAILED: $tool is not installed (apt-get install prometheus chromium curl)"
      exit 1
    fi
    echo "monitoring test: SKIPPED: $tool is not installed (apt-get install prometheus chromium curl)"
    exit 0
  fi
done
began=$(date +%s)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "monitoring test: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
  echo "monitoring test: FAILED: $*"
  for f in "$work"/*.log; do echo "--- $f (last lines)"; tail -n 5 "$f"; done
  exit 1
}

# 1. The files, checked offline.
cd "$repo/deploy/prometheus"
promtool check config prometheus.yml >/dev/null || fail "promtool check config prometheus.yml"
promtool check rules fedpq-rules.yml || fail "promtool check rules"
promtool test rules fedpq-rules.test.yml || fail "promtool test rules"
cd "$repo"
python3 - <<'EOF' || fail "deploy/kubernetes/monitoring/prometheusrule.yaml or deploy/grafana/fedpq-dashboard.json"
import json, yaml
rules = yaml.safe_load(open("deploy/prometheus/fedpq-rules.yml"))
obj = yaml.safe_load(open("deploy/kubernetes/monitoring/prometheusrule.yaml"))
assert obj["kind"] == "PrometheusRule", obj["kind"]
assert obj["spec"] == rules, "the PrometheusRule's groups differ from fedpq-rules.yml's: copy them"
dash = json.load(open("deploy/grafana/fedpq-dashboard.json"))
assert dash["panels"] and all(p["targets"] for p in dash["panels"])
print("PrometheusRule: the same %d rules; dashboard: %d panels" % (len(rules["groups"][0]["rules"]), len(dash["panels"])))
EOF

# 2. The runs.
go build -o "$work/fedpq" ./cmd/fedpq
fedpq=$work/fedpq
base=$((20000 + $$ % 12000)) # ports base to base+49, below the ephemeral ports (32768 up) that outgoing connections take
port() { echo $((base + $1)); }
token=t0ken

# server NAME OFFSET ARGS...: a server on port base+OFFSET, metrics base+OFFSET+1.
server() {
  local name=$1 off=$2; shift 2
  "$fedpq" server --listen "127.0.0.1:$(port "$off")" --metrics "127.0.0.1:$(port $((off + 1)))" --token $token \
    --out "$work/$name" "$@" >"$work/$name-server.log" 2>&1 &
  pids+=($!)
}
# client NAME SERVEROFFSET METRICSOFFSET ARGS...: a client process, its
# keys and state files made in a config directory of its own.
client() {
  local name=$1 srv=$2 met=$3; shift 3
  XDG_CONFIG_HOME=$work/$name-config "$fedpq" client --server "127.0.0.1:$(port "$srv")" \
    --metrics "127.0.0.1:$(port "$met")" --token $token "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
}

cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yml]
scrape_configs:
- job_name: fedpq-server
  static_configs:
  - targets: ['127.0.0.1:$(port 1)']
    labels: {run: dp}
  - targets: ['127.0.0.1:$(port 11)']
    labels: {run: frozen}
  - targets: ['127.0.0.1:$(port 21)']
    labels: {run: starved}
- job_name: fedpq-clients
  static_configs:
  - targets: ['127.0.0.1:$(port 2)', '127.0.0.1:$(port 3)', '127.0.0.1:$(port 4)']
    labels: {run: dp}
  - targets: ['127.0.0.1:$(port 12)', '127.0.0.1:$(port 13)', '127.0.0.1:$(port 14)']
    labels: {run: frozen}
  - targets: ['127.0.0.1:$(port 22)']
    labels: {run: starved}
EOF
sed -E 's/^( *)for: .*/\1for: 0s/' deploy/prometheus/fedpq-rules.yml >"$work/rules.yml"
prom=127.0.0.1:$(port 40)
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" --web.listen-address="$prom" \
  >"$work/prometheus.log" 2>&1 &
pids+=($!)

# dp: DP-FedAvg, user-level budget epsilon 1, rounds of 3 s at least: its
# clients wait 3 s before each upload, so that the page is read mid-run
# however fast they train (on an idle machine, 8 rounds of training alone
# took 3.4 s, and the run was over before the checks below began).
server dp 0 --clients 3 --rounds 8 --epochs 300 --model mlp --mechanism none --clip 1 --target-epsilon 1 \
  --perturb updates --weighting mean --eval-every 1 --linger
# frozen: ldpq, rounds of 2 s.
server frozen 10 --clients 3 --rounds 1000 --epochs 500 --model linear --mechanism ldpq --epsilon 1 --round-timeout 2s --linger
# starved: 16 clients in one fleet.
server starved 20 --clients 16 --rounds 1000 --epochs 100 --model mlp --mechanism ldpq --epsilon 1 --linger
for k in 0 1 2; do
  client dp$k 0 $((2 + k)) --partition $k/3 --delay fixed:3
  client frozen$k 10 $((12 + k)) --partition $k/3
done
GOMAXPROCS=1 client starved 20 22 --partition 0-15/16 --workers 4

# query EXPR: Prometheus's answer's result, as JSON.
query() { curl -sf --get "http://$prom/api/v1/query" --data-urlencode "query=$1"; }
value() { query "$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'; }
# firing: the alerts firing, one "name instance run" a line.
firing() {
  curl -sf "http://$prom/api/v1/alerts" | python3 -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["state"] == "firing":
        l = a["labels"]
        print(a["labels"]["alertname"], l.get("instance", "-"), l.get("run", "-"))' | sort -u
}
await() { # await SECONDS WHAT CMD...: until CMD succeeds
  local until=$(($(date +%s) + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || fail "waited $((until - began)) s from the start for $what (firing: $(firing | tr '\n' ';'); fired before: $(sort -u "$work/fired" 2>/dev/null | tr '\n' ';'))"
    sleep 0.5
  done
}
await 60 "Prometheus" curl -sf "http://$prom/-/ready"
await 60 "the dp run's server" curl -sf "127.0.0.1:$(port 1)/readyz"

# 20 clients with a wrong token against dp, at once: each is refused for
# good (after preparing its data and model, seconds at nice 19 here). Not
# before Prometheus has the server's refusals at 0: a counter first scraped
# at 12 has no increase (a run here on a loaded machine missed the alert so).
scraped() { [ "$(value 'fedpq_server_join_refusals_total{run="dp",reason="denied"}')" = 0 ]; }
await 60 "a scrape of the dp run's refusals" scraped
for k in $(seq 20); do
  XDG_CONFIG_HOME=$work/wrong-config-$k "$fedpq" client --server "127.0.0.1:$(port 0)" --partition 0/3 \
    --token wrong >"$work/wrong-$k.log" 2>&1 &
  pids+=($!)
done

# frozen: client 2 stops once it joined, and stays in its rounds.
await 60 "the frozen run's 3 clients" test "$(curl -sf "127.0.0.1:$(port 11)/metrics" | awk '$1=="fedpq_server_connected_clients"{print $2}')" = 3
kill -STOP "$pid_frozen2"

# The dp run's page mid-run: rounds done, not finished.
mid() { n=$(value 'fedpq_server_rounds_done{run="dp"}'); [ -n "$n" ] && [ "${n%.*}" -ge 3 ] && [ "$(value 'fedpq_server_run_finished{run="dp"}')" = 0 ]; }
await 120 "round 3 of the dp run" mid
shot=$work/page.png
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,1250 --screenshot="$shot" \
  "http://127.0.0.1:$(port 1)/" >"$work/chromium.log" 2>&1 || fail "chromium --screenshot"
chromium --headless --no-sandbox --disable-gpu --dump-dom "http://127.0.0.1:$(port 1)/" 2>>"$work/chromium.log" >"$work/page.html" \
  || fail "chromium --dump-dom"
python3 - "$work/page.html" "$shot" <<'EOF' || fail "the live page as Chromium rendered it"
import re, sys, os
h = open(sys.argv[1]).read()
status = re.search(r'id="status">([^<]*)<', h).group(1)
done = re.search(r'id="done">(\d+) of (\d+)<', h)
assert status == "running", status
assert 3 <= int(done.group(1)) < 8 and done.group(2) == "8", done.groups()
assert re.search(r'<polyline class="acc" points="[0-9., ]+"', h), "no accuracy curve"
assert "budget used" in h and re.search(r'model</td><td>ε = [0-9.e-]+ at δ', h), "no user-level epsilon of the model"
assert h.count('class="uploads"') >= 3, "fewer than 3 rounds' upload bars"
assert not re.search(r'(src|href)="https?:', h), "an external asset"
size = os.path.getsize(sys.argv[2])
assert open(sys.argv[2], "rb").read(8) == b"\x89PNG\r\n\x1a\n" and size > 20000, size
print("live page mid-run: %s, %s of %s rounds; screenshot %d bytes" % (status, done.group(1), done.group(2), size))
EOF
if [ -n "${SCREENSHOT:-}" ]; then cp "$shot" "$SCREENSHOT"; fi

# frozen: once its missing uploads are alerted, let client 2 go (its late
# upload is refused) and kill every client: no round begins again.
# fired ALERT PORTOFFSET: the alert has fired for that process, now or
# at an earlier look (each look is kept in $work/fired).
fired() { firing >>"$work/fired"; grep -q "^$1 127.0.0.1:$(port "$2") " "$work/fired"; }
await 90 "FedpqUploadsMissing on the frozen run" fired FedpqUploadsMissing 11
kill -CONT "$pid_frozen2"
sleep 2
for k in 0 1 2; do eval "kill -KILL \$pid_frozen$k"; done

# Each alert, and the port (its offset) of the process it must fire for:
# each must have fired, not all at once (on an idle machine the frozen
# run's missing uploads stopped firing within seconds, before its stalled
# round fired).
expected="FedpqPrivacyBudgetNearTarget:1 FedpqRefusalsSpiking:1 FedpqUploadsMissing:11 FedpqRoundStalled:11 FedpqTargetDown:12 FedpqFleetCPUStarved:22"
all_fired() { for e in $expected; do fired "${e%%:*}" "${e##*:}" || return 1; done; }
await 120 "every alert to fire" all_fired
refused=$(grep -l "PermissionDenied" "$work"/wrong-*.log | wc -l)
[ "$refused" = 20 ] || fail "$refused of the 20 wrong-token clients were refused"
echo "alerts fired, by run:"
sort -u "$work/fired" | sed 's/^/  /'

# 3. The dashboard's queries, each with data.
python3 - "$prom" deploy/grafana/fedpq-dashboard.json <<'EOF' || fail "a dashboard query returned no data"
import json, sys, urllib.parse, urllib.request
prom, path = sys.argv[1], sys.argv[2]
empty, n = [], 0
for p in json.load(open(path))["panels"]:
    for t in p["targets"]:
        n += 1
        url = "http://%s/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": t["expr"]}))
        r = json.load(urllib.request.urlopen(url))["data"]["result"]
        print("  %-48s %-2s %3d series  %s" % (p["title"][:48], t["refId"], len(r), t["expr"][:70]))
        if not r:
            empty.append("%s: %s" % (p["title"], t["expr"]))
assert not empty, "no data: " + "; ".join(empty)
print("dashboard: %d queries, each with data" % n)
EOF
echo "fleet scheduling latency, 90th percentile (s), by run:"
query 'histogram_quantile(0.9, sum by (run, instance, le) (rate(go_sched_latencies_seconds_bucket{job="fedpq-clients"}[5m])))' |
  python3 -c 'import json,sys; [print("  %s %s %.4f" % (r["metric"]["run"], r["metric"]["instance"], float(r["value"][1]))) for r in json.load(sys.stdin)["data"]["result"]]'
echo "monitoring test: PASSED in $(($(date +%s) - began)) s"
