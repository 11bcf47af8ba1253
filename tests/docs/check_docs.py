#!/usr/bin/env python3
"""The README a newcomer reads stays short, and no link in it or in docs/
points nowhere: every relative link names a file of the tree and, with a
#fragment, a heading of that file (as GitHub makes anchors of headings).

    tests/docs/check_docs.py SOURCE_DIR
"""
import os
import re
import sys

README_LIMIT = 12000


def anchors(path):
    found = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and line.startswith("#"):
                text = line.lstrip("#").strip().lower()
                found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    pages = ["README.md"] + sorted(
        os.path.join("docs", p) for p in os.listdir(os.path.join(root, "docs")) if p.endswith(".md"))
    problems = []
    size = len(open(os.path.join(root, "README.md"), encoding="utf-8").read())
    if size > README_LIMIT:
        problems.append(f"README.md is {size} characters; at most {README_LIMIT}")
    for page in pages:
        text = open(os.path.join(root, page), encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # Code is not linked.
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue  # http:, mailto: and the like are not checked here.
            path, _, fragment = link.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(os.path.join(root, target)):
                problems.append(f"{page}: {link}: no such file")
            elif fragment and target.endswith(".md") and fragment not in anchors(
                    os.path.join(root, target)):
                problems.append(f"{page}: {link}: no such heading in {target}")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"check_docs: README.md {size} characters, {len(pages)} pages, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
