#!/usr/bin/env python3
"""Checks that docs/ is a linked reference: every page is in docs/README.md's index, every
other tracked file under docs/ (a chart, a table) is linked from some page, and no relative
link in README.md, ARCHITECTURE.md or docs/ points at a missing file. Exits 1 on a problem.

    scripts/check-docs.py
"""
import os
import re
import subprocess
import sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
tracked = subprocess.run(["git", "ls-files", "docs"], capture_output=True, text=True,
                         check=True).stdout.split()
pages = [f for f in tracked if f.endswith(".md") and f.count("/") == 1]
sources = [f for f in tracked if f.endswith(".md")] + ["README.md", "ARCHITECTURE.md"]

linked = set()
for source in sources:
    with open(source, encoding="utf-8") as f:
        text = f.read()
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        linked.add((source, os.path.normpath(os.path.join(os.path.dirname(source), target))))

problems = []
targets = {t for _, t in linked}
for f in tracked:
    if f not in pages and f not in targets:
        problems.append(f"{f}: no page links it")
with open("docs/README.md", encoding="utf-8") as f:
    index = f.read()
for page in pages:
    if page != "docs/README.md" and f"({os.path.basename(page)})" not in index:
        problems.append(f"{page}: not in docs/README.md")
for source, target in sorted(linked):
    if not os.path.exists(target):
        problems.append(f"{source}: links {target}, which does not exist")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
