#!/usr/bin/env python3
"""The share of lines a test ran in each of the named source files.

Reads gcov's JSON (gcov --json-format --stdout over each file's .gcda in a
--coverage build) and prints, per file, lines run / lines with code. With
--min, exits 1 when a file is below it (or was never run at all); with
--missed, also names the lines not run.

    coverage_report.py BUILD_DIR SOURCE_ROOT FILE [FILE...] [--min=80] [--missed]
"""
import argparse
import json
import os
import subprocess
import sys


def gcda_of(build_dir, source):
    """Every .gcda named after `source` (CMake names objects after their
    sources); only the one built from `source` reports its lines."""
    name = os.path.basename(source) + ".gcda"
    return [os.path.join(root, name) for root, _, files in os.walk(build_dir) if name in files]


def lines_of(gcda, source_path):
    """(run, total, lines not run) over `source_path`'s lines in gcov's
    report of `gcda`."""
    out = subprocess.run(
        ["gcov", "--json-format", "--stdout", "--object-directory", os.path.dirname(gcda), gcda],
        check=True, capture_output=True, text=True).stdout
    run = total = 0
    missed = []
    for doc in out.splitlines():
        if not doc.strip():
            continue
        for f in json.loads(doc)["files"]:
            if os.path.realpath(f["file"]) != os.path.realpath(source_path):
                continue
            for line in f["lines"]:
                total += 1
                run += line["count"] > 0
                if line["count"] == 0:
                    missed.append(line["line_number"])
    return run, total, missed


def ranges(numbers):
    """1,2,3,7 -> "1-3,7"."""
    out = []
    for n in sorted(set(numbers)):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir")
    p.add_argument("source_root")
    p.add_argument("files", nargs="+")
    p.add_argument("--min", type=float, default=None, help="fail below this percentage")
    p.add_argument("--missed", action="store_true", help="name the lines not run")
    a = p.parse_args()
    low = []
    for source in a.files:
        path = os.path.join(a.source_root, source)
        best = (0, 0, [])
        for gcda in gcda_of(a.build_dir, source):
            run, total, missed = lines_of(gcda, path)
            if total > best[1] or (total == best[1] and run > best[0]):
                best = (run, total, missed)
        run, total, missed = best
        share = 100.0 * run / total if total else 0.0
        print(f"{share:6.1f} %  {run:5d} of {total:5d} lines  {source}")
        if a.missed and missed:
            print(f"           not run: {ranges(missed)}")
        if a.min is not None and (total == 0 or share < a.min):
            low.append(source)
    if low:
        print(f"coverage_report: below {a.min} %: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
