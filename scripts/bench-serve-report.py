#!/usr/bin/env python3
"""Summarises scripts/bench-serve.sh: tps and per-statement p50 / p99 per target,
workload and client count (median tps over rounds, latencies over every transaction
of every round), Weir's ratios to PostgreSQL, and the no-loss check.

usage: bench-serve-report.py LOG_DIR WEIR_SUM_V VIEW_EQUALS_QUERY PROTOCOL SECONDS
"""
import collections
import glob
import os
import re
import statistics
import sys

log_dir, sum_v, view_ok, protocol, seconds = sys.argv[1:6]
runs = collections.defaultdict(lambda: {"tps": [], "lat": collections.defaultdict(list)})
updates_acknowledged = 0
failures = []

for out in sorted(glob.glob(os.path.join(log_dir, "*.out"))):
    name = os.path.basename(out)[: -len(".out")]
    target, workload, clients, _round = name.split(".")
    key = (workload, int(clients[1:]), target)
    text = open(out).read()
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", text)
    if not m:
        failures.append(f"{name}: no tps in pgbench output")
        continue
    runs[key]["tps"].append(float(m.group(1)))
    m = re.search(r"number of failed transactions: (\d+)", text)
    if m and int(m.group(1)) != 0:
        failures.append(f"{name}: {m.group(1)} failed transactions")
    statements = ["UPDATE", "SELECT"] if workload == "mixed" else ["SELECT"]
    for log in glob.glob(os.path.join(log_dir, name + ".[0-9]*")):
        for line in open(log):
            fields = line.split()
            latency_us, script = int(fields[2]), int(fields[3])
            runs[key]["lat"][statements[script]].append(latency_us)
            if target.startswith("weir") and statements[script] == "UPDATE":
                updates_acknowledged += 1


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] / 1000.0 if values else float("nan")


print(f"serving benchmark: pgbench -M {protocol}, {seconds} s per run, "
      f"{max((len(r['tps']) for r in runs.values()), default=0)} rounds interleaved")
print(f"{'workload':8} {'clients':>7} {'target':9} {'tps':>9} {'÷ PG':>6}  "
      f"{'UPDATE p50/p99 ms':>18}  {'SELECT p50/p99 ms':>18}")
for key in sorted(runs, key=lambda k: (k[0], k[1], k[2] != "postgres", k[2])):
    workload, clients, target = key
    r = runs[key]
    tps = statistics.median(r["tps"])
    pg = runs.get((workload, clients, "postgres"))
    ratio = tps / statistics.median(pg["tps"]) if pg and pg["tps"] else float("nan")
    cells = []
    for s in ("UPDATE", "SELECT"):
        lat = r["lat"].get(s)
        cells.append(f"{pct(lat, 0.5):7.2f} / {pct(lat, 0.99):7.2f}" if lat else f"{'-':>18}")
    print(f"{workload:8} {clients:>7} {target:9} {tps:9.0f} {ratio:6.2f}  {cells[0]:>18}  {cells[1]:>18}")

print(f"weir: acknowledged UPDATEs {updates_acknowledged}, sum(v) in t {sum_v}, "
      f"view equals its query: {view_ok}")
if str(updates_acknowledged) != sum_v.strip():
    failures.append(f"lost or extra updates: {updates_acknowledged} acknowledged, sum(v) = {sum_v}")
if view_ok != "true":
    failures.append("the view differs from its query")
for f in failures:
    print("FAILED:", f)
sys.exit(1 if failures else 0)
