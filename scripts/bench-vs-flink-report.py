#!/usr/bin/env python3
"""The table of one bench-vs-flink.sh sitting: per event rate, parallelism and query,
the median events/s of each engine, their ratio (and the range of the per-repetition
ratios, Weir's run against the Flink run next to it), Weir's peak RSS against Flink's
largest heap after GC (and Weir's peak anonymous memory: RSS without the binary's
code pages, in sittings that recorded it), and Weir's output digest (the same in
every repetition, or "varies")."""
import csv
import statistics
import sys
from collections import defaultdict


def num(v):
    try:
        return float(v)
    except ValueError:
        return float("nan")


def main(path):
    runs = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            runs[(int(r["rate"]), int(r["par"]), r["query"], r["engine"])].append(r)
    keys = sorted({k[:3] for k in runs}, key=lambda k: (k[0], k[1], int(k[2][1:])))
    print("| rate ev/s | p | query | events | Flink ev/s | Weir ev/s | Weir ÷ Flink | per-rep ratios | "
          "Flink heap after GC MiB | Flink RSS MiB | Weir peak RSS MiB | Weir peak anon MiB | "
          "Weir output (rows, checksum) |")
    print("|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for rate, par, q in keys:
        fl = runs.get((rate, par, q, "flink"), [])
        we = runs.get((rate, par, q, "weir"), [])
        f_eps = [num(r["events_per_s"]) for r in fl if num(r["events_per_s"]) == num(r["events_per_s"])]
        w_eps = [num(r["events_per_s"]) for r in we if num(r["events_per_s"]) == num(r["events_per_s"])]
        fm = statistics.median(f_eps) if f_eps else float("nan")
        wm = statistics.median(w_eps) if w_eps else float("nan")
        pairs = {r["rep"]: num(r["events_per_s"]) for r in fl}
        ratios = sorted(num(r["events_per_s"]) / pairs[r["rep"]] for r in we
                        if pairs.get(r["rep"], 0) > 0)
        rng = f"{ratios[0]:.1f}–{ratios[-1]:.1f}" if ratios else "–"
        heap = max((int(num(r["heap_after_gc_mb"])) for r in fl), default=0)
        frss = max((int(num(r["peak_rss_mb"])) for r in fl), default=0)
        wrss = max((int(num(r["peak_rss_mb"])) for r in we), default=0)
        anons = [num(r.get("peak_anon_mb") or "nan") for r in we]
        anon = f"{max(anons):,.0f}" if anons and all(a == a for a in anons) else "–"
        outputs = {r["output"] for r in we}
        out = outputs.pop() if len(outputs) == 1 else "varies"
        events = (fl or we)[0]["events"]
        ratio = wm / fm if fm == fm and fm > 0 else float("nan")
        failed = ("" if len(f_eps) == len(fl) and len(w_eps) == len(we)
                  else f" ({len(fl) - len(f_eps)} Flink, {len(we) - len(w_eps)} Weir runs failed)")
        print(f"| {rate:,} | {par} | {q} | {int(events):,} | {fm:,.0f} | {wm:,.0f} | {ratio:.1f}{failed} | {rng} | "
              f"{heap:,} | {frss:,} | {wrss:,} | {anon} | {out} |")


if __name__ == "__main__":
    main(sys.argv[1])
