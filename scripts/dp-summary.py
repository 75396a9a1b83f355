#!/usr/bin/env python3
"""The user-level DP table (docs/privacy.md, "The table") from the runs of
scripts/dp-table.sh, which may come from several sessions and machines:

  scripts/dp-summary.py RESULTS.csv...              # the table, one per setting
  scripts/dp-summary.py --grid RESULTS.csv...       # the grid users choose from:
      # per setting, each row's accuracy at each target, at that target's
      # server learning rate (GRID_LR)
  scripts/dp-summary.py --merge OUT.csv RESULTS.csv...
      # OUT.csv (docs/results/dp-table.csv) and the others as one file, a
      # run measured twice kept once (the later line)
  scripts/dp-summary.py --record RUN.json DATASET PARTITION CLIENTS PER_ROUND \\
      ROUNDS ROW TRIALS EPS SEED SUM_ONLY GLOBAL_LR  # one run's line (dp-table.sh)

Accuracy is the final round's, over the seeds as mean ± standard error with
each seed's in brackets; seconds per round are the mean of the seeds that
state them, those run with the secure-aggregation protocol apart from those
without it (--secure-sum-only), and depend on what else the machine ran and
on the engine's speed that day; z and the epsilon
against the models are the first seed's, the server's the range over the
seeds that state it (it depends on the fewest uploads a round summed).
"""
import csv
import json
import os
import statistics
import sys

FIELDS = ["dataset", "partition", "clients", "per_round", "rounds", "row", "trials", "target_eps", "seed",
          "accuracy", "bits_per_param", "seconds_per_round", "sum_only", "noise_multiplier", "eps_models",
          "eps_server", "global_lr"]
RUN = FIELDS[:9] + ["global_lr"]  # what identifies a run
LR = "0.25"  # the server learning rate of lines that do not state one (experiments/mnist-dpfedavg.yaml's)
SETTING = FIELDS[:5]  # what one table shares
GRID_LR = {"-": LR, "8": LR, "3": "0.1", "1": "0.05"}  # each target's own (docs/privacy.md)
GRID_EPS = ["-", "8", "3", "1"]
ROWS = ["none", "central", "ddgauss", "skellam", "pbm", "ldpq", "corbin"]
SECURE = {"ddgauss", "skellam", "pbm"}  # the rows --secure-sum-only applies to


def record(path, dataset, partition, clients, per_round, rounds, row, trials, eps, seed, sum_only, lr=LR):
    r = json.load(open(path))
    u = (r.get("privacy") or {}).get("user") or {}

    def e(b):
        return f"{b['eps']:.6g}" if b else ""
    line = [dataset, partition, clients, per_round, rounds, row, trials if row == "pbm" else "", eps, seed,
            f"{r['final_accuracy']:.6g}", f"{r['uplink_bits_per_param']:.4g}",
            f"{r['seconds'] / r['rounds']:.3g}", sum_only, f"{u.get('noise_multiplier') or ''}",
            e(u.get("model")), e(u.get("server")), lr]
    csv.writer(sys.stdout, lineterminator="\n").writerow(line)


def read(paths):
    """The runs of the files, the later line of a run measured twice."""
    runs = {}
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f, fieldnames=FIELDS):
                if r["dataset"] == "dataset":
                    continue  # a header
                r["global_lr"] = r.get("global_lr") or LR
                runs[tuple(r[k] for k in RUN)] = r
    return runs


def order(r):
    eps = r["target_eps"]
    return (ROWS.index(r["row"]) if r["row"] in ROWS else len(ROWS), r["trials"],
            -float(eps) if eps != "-" else 1, -float(r["global_lr"]))


def settings_of(runs):
    """The runs by setting (one table each)."""
    settings = {}
    for r in runs:
        settings.setdefault(tuple(r[k] for k in SETTING), []).append(r)
    return settings


def label(row, trials):
    return row + (f", {trials} trial{'s' if trials != '1' else ''}" if trials else "")


def spread(acc):
    """Accuracies (%) as mean ± standard error, a single one as itself."""
    if len(acc) == 1:
        return f"{acc[0]:.2f}"
    return f"{statistics.mean(acc):.2f} ± {statistics.stdev(acc) / len(acc) ** 0.5:.2f}"


def seconds(g, only):
    """The mean seconds per round of the runs of g that state them, a secure
    row's with the protocol (only "") or without it (only "1")."""
    timed = [float(r["seconds_per_round"]) for r in g
             if r["seconds_per_round"] and (r["sum_only"] if r["row"] in SECURE else "") == only]
    return f"{statistics.mean(timed):.2f}" + (" (sum only)" if only else "") if timed else None


def table(runs):
    settings = settings_of(runs.values())
    for s in sorted(settings):
        dataset, partition, clients, per_round, rounds = s
        print(f"{dataset}, {partition}, {clients} clients, {per_round} a round (Poisson), {rounds} rounds\n")
        print("| row | target eps | server lr | accuracy | bits/param sent | s/round | z | user-level eps: models | : server |")
        print("|---|---|---|---|---|---|---|---|---|")
        groups = {}
        for r in sorted(settings[s], key=lambda r: int(r["seed"])):
            groups.setdefault((r["row"], r["trials"], r["target_eps"], r["global_lr"]), []).append(r)
        for g in sorted(groups.values(), key=lambda g: order(g[0])):
            acc = [100 * float(r["accuracy"]) for r in g]
            shown = f"{spread(acc)}% " + ("(1 seed)" if len(acc) == 1 else f"({', '.join(f'{a:.2f}' for a in acc)})")
            first = g[0]
            secs = ", ".join(t for t in (seconds(g, ""), seconds(g, "1")) if t) or "-"
            servers = sorted(float(r["eps_server"]) for r in g if r["eps_server"])
            server = "none" if not servers else f"{servers[0]:.3g}" if servers[0] == servers[-1] \
                else f"{servers[0]:.3g}-{servers[-1]:.3g}"
            model = f"{float(first['eps_models']):.3g}" if first["eps_models"] else "none"
            z = f"{float(first['noise_multiplier']):.4g}" if first["noise_multiplier"] else "-"
            print(f"| {label(first['row'], first['trials'])} | {first['target_eps']} | {first['global_lr']} | {shown} | "
                  f"{float(first['bits_per_param']):.3g} | {secs} | {z} | {model} | {server} |")
        print()


def grid(runs):
    settings = settings_of(r for r in runs.values() if r["global_lr"] == GRID_LR.get(r["target_eps"]))
    for s in sorted(settings, key=lambda s: (s[0] != "mnist", int(s[2]), s[1] != "iid", s)):
        dataset, partition, clients, per_round, rounds = s
        print(f"{dataset}, {partition}, {clients} clients, {per_round} a round, {rounds} rounds: accuracy (%)\n")
        print("| row | bits/param sent | no privacy | eps 8 | eps 3 | eps 1 | s/round |")
        print("|---|---|---|---|---|---|---|")
        rows = {}
        for r in sorted(settings[s], key=lambda r: int(r["seed"])):
            rows.setdefault((r["row"], r["trials"]), []).append(r)
        for (row, trials), g in sorted(rows.items(), key=lambda kv: order(kv[1][0])):
            name = label(row, trials)
            if row in ("ldpq", "corbin"):
                name += f" (user-level eps {float(g[0]['eps_models']):.2g})"
            cells = []
            for e in GRID_EPS:
                acc = [100 * float(r["accuracy"]) for r in g if r["target_eps"] == e]
                cells.append("" if not acc else spread(acc) + ("" if len(acc) == 3 else
                             f" ({len(acc)} seed{'s' if len(acc) > 1 else ''})"))
            bits = sorted({f"{float(r['bits_per_param']):.3g}" for r in g})
            # A secure row's seconds without the protocol where measured so
            # (--secure-sum-only): the rows' are then comparable.
            secs = seconds(g, "1" if row in SECURE and any(r["sum_only"] for r in g) else "") or "-"
            print(f"| {name} | {', '.join(bits)} | " + " | ".join(cells) + f" | {secs} |")
        print()


def merge(out, paths):
    runs = read(([out] if os.path.exists(out) else []) + paths)
    with open(out, "w") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for k in sorted(runs):
            w.writerow(runs[k])


def main(args):
    if args[:1] == ["--record"] and len(args) in (12, 13):
        record(*args[1:])
    elif args[:1] == ["--merge"] and len(args) >= 2:
        merge(args[1], args[2:])
    elif args[:1] == ["--grid"] and len(args) >= 2:
        grid(read(args[1:]))
    elif args and not args[0].startswith("-"):
        table(read(args))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
