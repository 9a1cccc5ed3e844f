#!/usr/bin/env python3
"""The table of bench-vs-flink.sh sittings: per event rate, parallelism and query,
the median events/s of each engine, their ratio (and the range of the per-repetition
ratios, Weir's run against the Flink run next to it), Weir's peak RSS against Flink's
largest heap after GC (and Weir's peak anonymous memory: RSS without the binary's
code pages, in sittings that recorded it), and Weir's output digest (the same in
every repetition, or "varies"). Then the cells that miss the targets (Weir at least
5x Flink's events/s; Weir's peak RSS below Flink's heap after GC; and, apart, Weir's
peak anonymous memory below it).

A cell is a rate, parallelism, query and event count. Several files make one table when they are sittings of one Weir binary split by
block (a whole matrix at 3 repetitions is longer than a working session): a cell's
runs may come from any of them, and its pairs are matched within a file."""
import csv
import statistics
import sys
from collections import defaultdict

TARGET = 5.0


def num(v):
    try:
        return float(v)
    except ValueError:
        return float("nan")


def ok(v):
    return v == v  # not NaN


def read(paths):
    runs = defaultdict(list)
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f, delimiter="\t"):
                r["file"] = path
                runs[(int(r["rate"]), int(r["par"]), r["query"], int(r["events"]), r["engine"])].append(r)
    return runs


def peak_anon(we):
    """Weir's largest peak anonymous memory of a cell's runs, or None when a run
    (of a sitting before it was recorded) lacks it."""
    anons = [num(r.get("peak_anon_mb") or "nan") for r in we]
    return max(anons) if anons and all(ok(a) for a in anons) else None


def cell(fl, we):
    """One row of the table, and the figures the summary needs."""
    f_eps = [num(r["events_per_s"]) for r in fl if ok(num(r["events_per_s"]))]
    w_eps = [num(r["events_per_s"]) for r in we if ok(num(r["events_per_s"]))]
    fm = statistics.median(f_eps) if f_eps else float("nan")
    wm = statistics.median(w_eps) if w_eps else float("nan")
    pairs = {(r["file"], r["rep"]): num(r["events_per_s"]) for r in fl}
    ratios = sorted(num(r["events_per_s"]) / pairs[(r["file"], r["rep"])] for r in we
                    if pairs.get((r["file"], r["rep"]), 0) > 0)
    heap = max((int(num(r["heap_after_gc_mb"])) for r in fl), default=0)
    wrss = max((int(num(r["peak_rss_mb"])) for r in we), default=0)
    failed = len(fl) - len(f_eps), len(we) - len(w_eps)
    return {
        "fm": fm, "wm": wm, "ratios": ratios, "heap": heap, "wrss": wrss, "failed": failed,
        "ratio": wm / fm if ok(fm) and fm > 0 else float("nan"),
        "frss": max((int(num(r["peak_rss_mb"])) for r in fl), default=0),
        "wanon": peak_anon(we),
        "outputs": {r["output"] for r in we},
        "reps": min(len(fl), len(we)),
    }


def row(rate, par, q, events, c):
    rng = f"{c['ratios'][0]:.1f}–{c['ratios'][-1]:.1f}" if c["ratios"] else "–"
    anon = f"{c['wanon']:,.0f}" if c["wanon"] is not None else "–"
    out = next(iter(c["outputs"])) if len(c["outputs"]) == 1 else "varies"
    fl_failed, we_failed = c["failed"]
    failed = f" ({fl_failed} Flink, {we_failed} Weir runs failed)" if fl_failed or we_failed else ""
    return (f"| {rate:,} | {par} | {q} | {events:,} | {c['reps']} | {c['fm']:,.0f} | {c['wm']:,.0f} | "
            f"{c['ratio']:.1f}{failed} | {rng} | {c['heap']:,} | {c['frss']:,} | {c['wrss']:,} | {anon} | {out} |")


def summary(cells):
    # A cell without a ratio (every run of an engine failed: a Flink run that hit
    # the harness's RUN_TIMEOUT, say) is neither at nor below the target: listed apart.
    unmeasured = [(k, c) for k, c in cells if not ok(c["ratio"])]
    slow = [(k, c) for k, c in cells if ok(c["ratio"]) and c["ratio"] < TARGET]
    name = lambda k: f"{k[2]} (rate {k[0]:,}, p = {k[1]}, {k[3]:,} events)"
    print()
    measured = len(cells) - len(unmeasured)
    print(f"Cells at >= {TARGET:g}x Flink (median): {measured - len(slow)} of {measured} with a ratio.")
    for k, c in slow:
        print(f"- below: {name(k)} {c['ratio']:.1f}x")
    for k, c in unmeasured:
        fl_failed, we_failed = c["failed"]
        print(f"- no ratio: {name(k)}: {fl_failed} Flink and {we_failed} Weir runs failed")
    below_heap(cells, "wrss", "peak RSS", name)
    # RSS counts the binary's code pages (60-70 MiB that Weir's runs touch), which a
    # JVM's heap figure leaves out; anonymous memory is the like-for-like part.
    below_heap(cells, "wanon", "peak anonymous memory", name)


def below_heap(cells, figure, label, name):
    """The cells whose Weir `figure` (MiB) is below Flink's heap after GC, and those above."""
    recorded = [(k, c) for k, c in cells if c[figure] is not None]
    above = [(k, c) for k, c in recorded if not (0 < c[figure] < c["heap"])]
    print(f"Cells with Weir's {label} below Flink's heap after GC: "
          f"{len(recorded) - len(above)} of {len(recorded)} that recorded it.")
    for k, c in above:
        share = c[figure] / c["heap"] if c["heap"] else float("nan")
        print(f"- above: {name(k)} {c[figure]:,.0f} against {c['heap']:,} MiB ({share:.2f}x)")


def main(paths):
    runs = read(paths)
    keys = sorted({k[:4] for k in runs}, key=lambda k: (k[0], k[1], int(k[2][1:]), k[3]))
    print("| rate ev/s | p | query | events | reps | Flink ev/s | Weir ev/s | Weir ÷ Flink | per-rep ratios | "
          "Flink heap after GC MiB | Flink RSS MiB | Weir peak RSS MiB | Weir peak anon MiB | "
          "Weir output (rows, checksum) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    cells = []
    for k in keys:
        c = cell(runs.get((*k, "flink"), []), runs.get((*k, "weir"), []))
        cells.append((k, c))
        print(row(*k, c))
    summary(cells)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench-vs-flink-report.py SITTING.tsv [MORE.tsv ...]")
    main(sys.argv[1:])
