#!/usr/bin/env python3
"""Summarises scripts/bench-ha.sh: INSERT tps (median over rounds) and p50 / p99
latency (over every transaction of every round) per mode and client count, HA-on's
ratios to HA-off, and the no-loss check.

usage: bench-ha-report.py LOG_DIR SECONDS (MODE ROWS VIEW_OK)...
"""
import collections
import glob
import os
import re
import statistics
import sys

log_dir, seconds = sys.argv[1:3]
checks = sys.argv[3:]
tps = collections.defaultdict(list)
lat = collections.defaultdict(list)
acked = collections.Counter()
failures = []
for out in sorted(glob.glob(os.path.join(log_dir, "*.out"))):
    name = os.path.basename(out)[: -len(".out")]
    mode, clients, _round = name.split(".")
    key = (int(clients[1:]), mode)
    text = open(out).read()
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", text)
    if not m:
        failures.append(f"{name}: no tps")
        continue
    tps[key].append(float(m.group(1)))
    for log in glob.glob(os.path.join(log_dir, name + ".[0-9]*")):
        for line in open(log):
            lat[key].append(int(line.split()[2]))
            acked[mode] += 1


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] / 1000.0


print(f"INSERT, {seconds} s per run; tps median over rounds; latency over all transactions")
print(f"{'clients':>7} {'HA':>4} {'tps':>9} {'p50 ms':>8} {'p99 ms':>8}")
for clients in sorted({c for c, _ in tps}):
    for mode in ("off", "on"):
        k = (clients, mode)
        if k in tps:
            print(f"{clients:>7} {mode:>4} {statistics.median(tps[k]):>9.0f} "
                  f"{pct(lat[k], 0.5):>8.2f} {pct(lat[k], 0.99):>8.2f}")
    off, on = (clients, "off"), (clients, "on")
    if off in tps and on in tps:
        print(f"{clients:>7} on/off: tps x{statistics.median(tps[on]) / statistics.median(tps[off]):.2f}, "
              f"p50 x{pct(lat[on], 0.5) / pct(lat[off], 0.5):.2f}")
ok = not failures
for i in range(0, len(checks), 3):
    mode, rows, view_ok = checks[i], int(checks[i + 1]), checks[i + 2] == "true"
    good = rows == acked[mode] and view_ok
    ok &= good
    print(f"HA {mode}: {rows} rows for {acked[mode]} acknowledged INSERTs, view equals query: "
          f"{view_ok} -> {'OK' if good else 'LOST OR WRONG'}")
for f in failures:
    print("FAILED:", f)
sys.exit(0 if ok else 1)
