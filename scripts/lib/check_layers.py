#!/usr/bin/env python3
"""Checks that every #include of the tree points down its layers.

    check_layers.py            (from the repository's root)

Each source folder has a rank; a file may include its own folder and those
of lower rank only, and `client/` and `server/` never include each other.
The one exception is the fabric's factory (common/fabric/fabric.cc), which
opens the backend a FabricKind names. Prints each include that points up
and exits 1 if there is one.
"""
import re
import subprocess
import sys

# Lowest first. A path belongs to the longest prefix that names it.
RANKS = {
    "common/": 0,
    "common/fabric/": 1,
    "common/fabric/soft/": 2,
    "common/fabric/verbs/": 2,
    "common/fabric/sim/": 3,  # A transport of the soft backend.
    "common/layout/": 1,
    "proto/": 2,
    "rkvpb/": 1,  # Generated from proto/rkvpb/*.proto.
    "rkv/": 0,  # The public header: Abseil and the standard library only.
    "client/include/rkv/": 0,
    "client/session/": 3,
    "client/protocol/": 4,
    "client/region/": 5,
    "client/cluster/": 6,
    "client/": 7,  # client.cc: what every Client shares.
    "client/kvctl/": 8,
    "server/kvserver/": 3,
    "server/kvcoord/": 3,
    "bench/": 9,
    "tests/": 10,
}
FACTORY = "common/fabric/fabric.cc"


def part(path):
    best = None
    for prefix in RANKS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def main():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.h", "*.cc"],
                           capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for f in files:
        src = part(f)
        if src is None or src in ("tests/", "bench/"):
            continue
        try:
            text = open(f, encoding="utf-8").read()
        except FileNotFoundError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'#include "([^"]+)"', line)
            if not m:
                continue
            dst = part(m.group(1))
            if dst is None or dst == src:
                continue
            top = lambda p: p.split("/")[0]
            crosses = {top(src), top(dst)} == {"client", "server"}
            up = RANKS[dst] > RANKS[src] or (RANKS[dst] == RANKS[src] and src != dst)
            if f == FACTORY and dst.startswith("common/fabric/"):
                continue
            if crosses or up:
                bad.append(f"{f}:{n}: {src} includes {m.group(1)} ({dst} is not below it)")
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"check_layers: {len(bad)} include(s) point up or across", file=sys.stderr)
        return 1
    print(f"check_layers: the includes of {len(files)} files point down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
