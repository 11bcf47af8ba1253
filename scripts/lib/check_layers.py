#!/usr/bin/env python3
"""Checks that every #include of the tree points down its layers.

    check_layers.py            (from the repository's root)

Each source folder has a rank; a file may include its own folder and those
of lower rank only. Beyond the ranks: `client/` and `server/` never include
each other; the public header is included by client/ only; the fabric's backends (common/fabric/{verbs,soft,sim}/) are
included only inside common/fabric/ (above it, fabric.h is the one seam);
proto/ is included only by client/, server/ and proto/. The one exception is
the fabric's factory (common/fabric/fabric.cc), which opens the backend a
FabricKind names. Includes of other projects (absl/, grpcpp/, gtest/, the
standard library) are not checked. Prints each include that breaks a rule
and exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

# Lowest first. A path belongs to the longest prefix that names it.
RANKS = {
    "common/": 0,
    "client/include/rkv/": 0,  # The public header: Abseil and the standard library only.
    "common/fabric/": 1,
    "common/layout/": 1,
    "common/fabric/soft/": 2,
    "common/fabric/verbs/": 2,
    "common/fabric/sim/": 3,  # A transport of the soft backend.
    "proto/": 2,
    "client/session/": 3,
    "client/protocol/": 4,
    "client/region/": 5,
    "client/cluster/": 6,
    "client/": 7,  # client.cc: what every Client shares.
    "client/kvctl/": 8,
    "client/python/": 8,  # The Python module: the public header only, in practice.
    "server/kvserver/": 3,
    "server/kvcoord/": 3,
    "bench/": 9,
    "tests/": 10,
}
# Include roots other than the tree's: the public header's and the
# generated protobuf headers'.
ALIASES = {"rkv/": "client/include/rkv/", "rkvpb/": "proto/rkvpb/"}
FACTORY = "common/fabric/fabric.cc"
BACKENDS = ("common/fabric/verbs/", "common/fabric/soft/", "common/fabric/sim/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def part(path):
    best = None
    for prefix in RANKS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def resolve(including, name, quoted, files):
    """The tree path an include names, or None for another project's."""
    for alias, root in ALIASES.items():
        if name.startswith(alias):
            return root + name[len(alias):]
    if quoted:
        near = os.path.normpath(os.path.join(os.path.dirname(including), name))
        if near in files:
            return near
    if part(name) is not None:
        return name
    return None


def main():
    files = set(
        subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.h", "*.cc"],
                       capture_output=True, text=True, check=True).stdout.split())
    bad = []
    for f in sorted(files):
        src = part(f)
        if src is None or src in ("tests/", "bench/") or not os.path.exists(f):
            continue
        with open(f, encoding="utf-8") as text:
            lines = text.read().splitlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            path = resolve(f, m.group(2), m.group(1) == '"', files)
            if path is None:
                continue
            dst = part(path)
            if dst is None:
                bad.append(f"{f}:{n}: includes {m.group(2)}, which is in no known part")
                continue
            if dst == src:
                continue
            why = None
            if {src.split("/")[0], dst.split("/")[0]} == {"client", "server"}:
                why = "client/ and server/ never include each other"
            elif dst.startswith(BACKENDS) and not src.startswith("common/fabric/"):
                why = "a fabric backend is reached through common/fabric/fabric.h"
            elif dst.startswith("client/include/") and not src.startswith("client/"):
                why = "the public header is the client library's"
            elif dst.startswith("proto/") and not src.startswith(("client/", "server/")):
                why = "proto/ is for client/ and server/ only"
            elif RANKS[dst] >= RANKS[src] and f != FACTORY:
                why = f"{dst} is not below {src}"
            if why:
                bad.append(f"{f}:{n}: includes {m.group(2)}: {why}")
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break the layers", file=sys.stderr)
        return 1
    print(f"check_layers: the includes of {len(files)} files point down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
