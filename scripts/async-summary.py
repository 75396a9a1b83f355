#!/usr/bin/env python3
"""The time-to-accuracy table of scripts/async-table.sh's runs.

  scripts/async-summary.py runs/async-table                 # the table
  scripts/async-summary.py runs/async-table --csv out.csv   # and one line per run
  scripts/async-summary.py --from docs/results/async-table.csv
  scripts/async-summary.py --real runs/async-deployed       # scripts/async-deployed.sh's

For each run (a directory NAME = MODE-MECH-sSEED with metrics.jsonl and
summary.json): the virtual clock (with --real, a deployed run's real
seconds) and the uploads at the first evaluation
reaching each target, the final accuracy. The table gives, per mechanism and
mode, their mean ± standard error over the seeds that reached the target
(with how many did), and the time to each target against sync-100's."""
import argparse, csv, glob, json, math, os, statistics, sys

TARGETS = (0.95, 0.97)
MODES = ["sync-all", "sync-100", "sync-over", "fedasync", "fedasync-lr0.1", "fedbuff10", "fedbuff50", "fedbuff100"]
LABELS = {
    "sync-all": "sync, all 1,000 a round",
    "sync-100": "sync, 100 a round",
    "sync-over": "sync, 100 of 130 (over-selection 0.3)",
    "fedasync": "FedAsync (K 1)",
    "fedasync-lr0.1": "FedAsync (K 1), global lr 0.1",
    "fedbuff10": "FedBuff K 10",
    "fedbuff50": "FedBuff K 50",
    "fedbuff100": "FedBuff K 100",
}
CLOCK = "clock"  # the metrics' time: "seconds" with --real
FIELDS = ["mode", "mech", "seed", "clock95", "uploads95", "clock97", "uploads97", "final", "clock", "uploads"]


def read_run(d):
    name = os.path.basename(d.rstrip("/"))
    mode, mech, seed = name.rsplit("-", 2)
    row = {"mode": mode, "mech": mech, "seed": int(seed.lstrip("s")), "uploads": 0, "clock": 0.0}
    for line in open(os.path.join(d, "metrics.jsonl")):
        r = json.loads(line)
        row["uploads"] += r["clients"]
        row["clock"] = r.get(CLOCK, 0.0)
        a = r.get("accuracy")
        if a is None:
            continue
        row["final"] = a
        for t in TARGETS:
            k = "%d" % round(100 * t)
            if a >= t and "clock" + k not in row:
                row["clock" + k], row["uploads" + k] = row["clock"], row["uploads"]
    return row


def runs(dirs):
    rows = []
    for top in dirs:
        for d in sorted(glob.glob(os.path.join(top, "*/"))):
            if os.path.exists(os.path.join(d, "summary.json")):
                rows.append(read_run(d))
    return rows


def mean_se(xs):
    if not xs:
        return None
    m = statistics.mean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return m, se


def cell(rows, key, n, fmt):
    xs = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    if not xs:
        return "not reached"
    m, se = mean_se(xs)
    s = (fmt % m) + ((" ± " + fmt % se) if len(xs) > 1 else "")
    return s + ("" if len(xs) == n else " (%d of %d)" % (len(xs), n))


def modes(rows):
    """The modes run, in MODES' order, then any other (sync-20, say)."""
    seen = {r["mode"] for r in rows}
    return [m for m in MODES if m in seen] + sorted(seen - set(MODES))


def table(rows):
    out = []
    clock = "real s" if CLOCK == "seconds" else "virtual s"
    setting = "deployed, --delay tail:0.1:10:1" if CLOCK == "seconds" else "speed tail:0.1:10"
    for mech in sorted({r["mech"] for r in rows}, key=["ldpq", "corbin", "none"].index):
        most = max(int(r["uploads"]) for r in rows if r["mech"] == mech)
        out.append("\n%s, MNIST IID, 1,000 clients, %s, %s uploads a run\n" % (mech, setting, format(most, ",")))
        out.append("| mode | seeds | to 95%%: %s | uploads | to 97%%: %s | uploads | final accuracy (%%) | 95%% time vs sync-100 |" % (clock, clock))
        out.append("|---|---|---|---|---|---|---|---|")
        base = [float(r["clock95"]) for r in rows if r["mech"] == mech and r["mode"] == "sync-100" and r.get("clock95") not in (None, "")]
        for mode in modes(rows):
            rs = [r for r in rows if r["mech"] == mech and r["mode"] == mode]
            if not rs:
                continue
            n = len(rs)
            fin = mean_se([100 * float(r["final"]) for r in rs])
            t95 = [float(r["clock95"]) for r in rs if r.get("clock95") not in (None, "")]
            ratio = "%.2fx" % (statistics.mean(base) / statistics.mean(t95)) if base and t95 else ""
            final = "%.2f ± %.2f" % fin if n > 1 else "%.2f" % fin[0]
            out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
                LABELS.get(mode, mode), n, cell(rs, "clock95", n, "%.1f"), cell(rs, "uploads95", n, "%.0f"),
                cell(rs, "clock97", n, "%.1f"), cell(rs, "uploads97", n, "%.0f"), final, ratio))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", help="directories of runs (scripts/async-table.sh's OUT)")
    ap.add_argument("--csv", help="write one line per run to this file")
    ap.add_argument("--real", action="store_true", help="deployed runs (scripts/async-deployed.sh): real seconds, not the virtual clock")
    ap.add_argument("--from", dest="src", help="read the runs from a CSV written by --csv instead")
    a = ap.parse_args()
    global CLOCK
    if a.real:
        CLOCK = "seconds"
    rows = runs(a.dirs)
    if a.src:
        rows += list(csv.DictReader(open(a.src)))
    if not rows:
        sys.exit("no finished runs")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            order = modes(rows)
            for r in sorted(rows, key=lambda r: (r["mech"], order.index(r["mode"]), int(r["seed"]))):
                w.writerow({k: r.get(k, "") for k in FIELDS})
    print(table(rows))


if __name__ == "__main__":
    main()
