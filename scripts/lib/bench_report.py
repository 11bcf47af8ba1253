#!/usr/bin/env python3
"""scripts/bench.sh's tables: reads the runs it lists and kvbench's JSON of
each, writes results.md and the data files its charts are drawn from.

    bench_report.py OUT_DIR HEADER_FILE

OUT_DIR/runs.tsv has one line per kvbench run: part (compare or scaling),
workload, store, threads, outstanding, repetition, JSON file. Every figure
in the tables is the median over the repetitions of one setting, each
figure (throughput, each percentile) taken separately.
"""
import json
import statistics
import sys
from pathlib import Path

LABELS = {
    "rkv1": "rkv, 1 server",
    "rkv3": "rkv, 3 servers",
    "rkvr2": "rkv, 2 copies",
    "rkvr3": "rkv, 3 copies",
    "memcached": "memcached",
    "redis": "Redis",
}
ORDER = ["rkv1", "memcached", "redis", "rkv3", "rkvr2", "rkvr3"]
# The write operation of each workload, as kvbench's JSON names it.
WRITE_OP = {"a": "update", "b": "update", "c": None, "d": "insert", "f": "rmw"}


def figure(run, op, key):
    lat = run.get("latency_us", {}).get(op)
    return None if lat is None else lat.get(key)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    return "" if v is None else f"{v:.{digits}f}"


def main():
    out = Path(sys.argv[1])
    header = Path(sys.argv[2]).read_text()
    runs = {}  # (part, workload, store, threads, outstanding) -> [run phase JSON]
    for line in (out / "runs.tsv").read_text().splitlines():
        part, workload, store, threads, outstanding, _rep, path = line.split("\t")
        with open(path) as f:
            doc = json.load(f)
        key = (part, workload, store, int(threads), int(outstanding))
        runs.setdefault(key, []).append(doc["run"])

    def stores_of(part):
        present = {k[2] for k in runs if k[0] == part}
        return [s for s in ORDER if s in present]

    def summary(key, workload):
        rs = runs[key]
        wop = WRITE_OP[workload]
        ops = [r["throughput_ops"] for r in rs]
        return {
            "n": len(rs),
            "ops": median(ops),
            "ops_min": min(ops),
            "ops_max": max(ops),
            "read_p50": median(figure(r, "read", "p50") for r in rs),
            "read_p99": median(figure(r, "read", "p99") for r in rs),
            "read_p999": median(figure(r, "read", "p999") for r in rs),
            "write_p50": median(figure(r, wop, "p50") for r in rs) if wop else None,
            "write_p99": median(figure(r, wop, "p99") for r in rs) if wop else None,
            "errors": sum(r.get("errors", 0) for r in rs),
            "rtt_get": median(r.get("rkv_costs", {}).get("get", {}).get("round_trips_per_op")
                              for r in rs),
        }

    md = [header.rstrip("\n"), ""]
    # The comparison: one row per workload and store.
    compare = sorted({(k[1], k[3], k[4]) for k in runs if k[0] == "compare"})
    if compare:
        stores = stores_of("compare")
        reps = max(len(v) for k, v in runs.items() if k[0] == "compare")
        spread = reps > 1
        md.append("| workload | store | ops/s | " + ("ops/s min-max | " if spread else "") +
                  "vs rkv, 1 server | read p50 | read p99 | read p99.9 | write p50 | write p99 |"
                  " rkv RTT/GET |")
        md.append("|---|---|---:|" + ("---:|" if spread else "") +
                  "---:|---:|---:|---:|---:|---:|---:|")
        bars = []
        for workload, threads, outstanding in compare:
            base = None
            row = [workload.upper()]
            for store in stores:
                key = ("compare", workload, store, threads, outstanding)
                if key not in runs:
                    row.append("")
                    continue
                s = summary(key, workload)
                if store == "rkv1":
                    base = s["ops"]
                ratio = s["ops"] / base if base else None
                cells = [workload.upper(), LABELS[store], fmt(s["ops"], 0)]
                if spread:
                    cells.append(f"{s['ops_min']:.0f}-{s['ops_max']:.0f}")
                cells += [fmt(ratio, 2), fmt(s["read_p50"]), fmt(s["read_p99"]),
                          fmt(s["read_p999"]), fmt(s["write_p50"]), fmt(s["write_p99"]),
                          fmt(s["rtt_get"], 2)]
                md.append("| " + " | ".join(cells) + " |")
                row.append(fmt(s["ops"], 0))
            bars.append(" ".join(v if v else "NaN" for v in row))
        (out / "throughput.table").write_text(
            "# workload " + " ".join(stores) + "\n" + "\n".join(bars) + "\n")
        md.append("")

    # The scaling run: one row per point, a column per store.
    scaling = sorted({(k[1], k[3], k[4]) for k in runs if k[0] == "scaling"},
                     key=lambda p: (p[1] * p[2], p[1]))
    if scaling:
        stores = stores_of("scaling")
        workload = scaling[0][0]
        reps = max(len(v) for k, v in runs.items() if k[0] == "scaling")
        md.append(f"Scaling, workload {workload.upper()}"
                  f"{f' (medians of {reps} runs)' if reps > 1 else ''}: throughput (ops/s) and "
                  "read p99 (us) by threads x operations in flight per thread.")
        md.append("")
        md.append("| threads x in flight | total in flight | " +
                  " | ".join(f"{LABELS[s]} ops/s" for s in stores) + " | " +
                  " | ".join(f"{LABELS[s]} p99" for s in stores) + " |")
        md.append("|---|---:|" + "---:|" * (2 * len(stores)))
        dat = ["# index label total " + " ".join(f"{s}_ops" for s in stores) + " " +
               " ".join(f"{s}_p99" for s in stores)]
        for i, (w, threads, outstanding) in enumerate(scaling):
            sums = [summary(("scaling", w, s, threads, outstanding), w)
                    if ("scaling", w, s, threads, outstanding) in runs else None
                    for s in stores]
            ops = [fmt(s["ops"], 0) if s else "" for s in sums]
            p99 = [fmt(s["read_p99"]) if s else "" for s in sums]
            md.append(f"| {threads}x{outstanding} | {threads * outstanding} | " +
                      " | ".join(ops) + " | " + " | ".join(p99) + " |")
            dat.append(f"{i} {threads}x{outstanding} {threads * outstanding} " +
                       " ".join(v or "NaN" for v in ops + p99))
        (out / "scaling.dat").write_text("\n".join(dat) + "\n")
        md.append("")

    errors = sum(r.get("errors", 0) for rs in runs.values() for r in rs)
    if errors:
        md.append(f"**{errors} operations failed** in these runs (see the logs in logs/).")
        md.append("")
    (out / "results.md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
