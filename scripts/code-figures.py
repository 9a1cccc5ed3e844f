#!/usr/bin/env python3
"""Structure figures of a Weir checkout (issue 19's before / after table).

    python3 scripts/code-figures.py [checkout]      # default: this one

Prints: the longest functions (lines from `fn` to its closing brace, tests
excluded), file-level import cycles between executor modules (two modules that
`use crate::` / `super::` each other, comments ignored), executor modules that are
`pub`, distinct `weir_executor::` paths the server and planner name, and SQLSTATE
codes named in the executor and storage.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")


def rust_files(d):
    for dp, _, fns in os.walk(os.path.join(ROOT, d)):
        for fn in fns:
            if fn.endswith(".rs"):
                yield os.path.join(dp, fn)


def without_tests_and_comments(text):
    return re.sub(r"//.*", "", text.split("#[cfg(test)]")[0])


def longest_functions(dirs, n=6):
    found = []
    for d in dirs:
        for p in rust_files(d):
            lines = open(p).read().split("#[cfg(test)]")[0].split("\n")
            for i, line in enumerate(lines):
                m = re.match(r"^(\s*)(pub(\([a-z]+\))? )?(async )?fn (\w+)", line)
                if not m:
                    continue
                for j in range(i, len(lines)):
                    if lines[j] == m.group(1) + "}":
                        found.append((j - i + 1, os.path.relpath(p, ROOT), m.group(5)))
                        break
    return sorted(found, reverse=True)[:n]


def import_cycles():
    src = os.path.join(ROOT, "executor/src")
    files = {}
    for p in rust_files("executor/src"):
        mod = os.path.relpath(p, src)[:-3].replace("/mod", "").replace("/", "::")
        if mod != "lib":
            files[mod] = without_tests_and_comments(open(p).read())

    def resolve(path):
        parts = path.strip(":").split("::")
        for k in range(len(parts), 0, -1):
            if "::".join(parts[:k]) in files:
                return "::".join(parts[:k])
        return None

    def related(a, b):
        return a == b or a.startswith(b + "::") or b.startswith(a + "::")

    edges = set()
    for m, text in files.items():
        parent = "::".join(m.split("::")[:-1])
        targets = [resolve(u) for u in re.findall(r"crate::([a-z_:]+)", text)]
        targets += [resolve((parent + "::" if parent else "") + u)
                    for u in re.findall(r"super::([a-z_:]+)", text)]
        edges |= {(m, t) for t in targets if t and not related(m, t)}
    return sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})


def main():
    for dirs in (["executor/src"], ["executor/src", "server/src", "planner/src"]):
        print(f"longest functions ({', '.join(d.split('/')[0] for d in dirs)}):")
        for n, p, f in longest_functions(dirs, 4):
            print(f"  {n:4} {p} {f}")
    cycles = import_cycles()
    print(f"import cycles between executor modules: {len(cycles)}")
    for a, b in cycles:
        print(f"  {a} <-> {b}")
    lib = open(os.path.join(ROOT, "executor/src/lib.rs")).read()
    mods = re.findall(r"^(pub(\(crate\))? )?mod \w+;", lib, re.M)
    public = [m for m in mods if m[0] == "pub "]
    print(f"pub executor modules: {len(public)} of {len(mods)}")
    paths = set()
    for d in ["server/src", "planner/src"]:
        for p in rust_files(d):
            paths |= set(re.findall(r"weir_executor::[A-Za-z_:]+", open(p).read()))
    print(f"distinct weir_executor:: paths in server and planner: {len(paths)}")
    codes = 0
    for d in ["executor/src", "storage/src"]:
        for p in rust_files(d):
            text = without_tests_and_comments(open(p).read())
            codes += len(re.findall(r'"(?:[0-9][0-9A-Z]{4}|0A000|XX000)"', text))
    print(f"SQLSTATE literals in executor and storage: {codes}")


main()
