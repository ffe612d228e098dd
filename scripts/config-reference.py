#!/usr/bin/env python3
"""Prints the field tables of docs/configuration.md from the commented rules/skewwatch.yaml.

The YAML file is the source of truth for defaults and their explanations; this keeps the
reference in step with it: python3 scripts/config-reference.py > /tmp/tables.md

The reload column (live / restart) comes from the code, not from this script: it keeps what
docs/configuration.md says now and writes `?` for a new field. Paste the tables, then run
`cargo run -p skewwatch-e2e --example generate`, which writes every reload cell from the
configuration's parts; a test fails while a cell is wrong.
"""
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "rules/skewwatch.yaml"
reload_class = {}
try:
    for row in open("docs/configuration.md", encoding="utf-8"):
        cells = row.rstrip("\n").split(" | ")
        if len(cells) == 4 and cells[0].startswith("| `"):
            reload_class[cells[0][3:-1]] = cells[2]
except FileNotFoundError:
    pass
stack = []  # (indent, key)
comment = []
rows = {}  # section -> [(path, default, text)]
for raw in open(path, encoding="utf-8"):
    line = raw.rstrip("\n")
    stripped = line.strip()
    if not stripped:
        comment = []
        continue
    indent = len(line) - len(line.lstrip(" "))
    if stripped.startswith("#"):
        text = stripped.lstrip("#").strip()
        # Commented-out examples (`- url: ...`, `key: value`) are not prose.
        if re.match(r'^(- )?[a-z0-9_]+:( ("|\d|\[|null|true|false).*)?$', text):
            continue
        comment.append(text)
        continue
    m = re.match(r"^( *)([a-z0-9_]+):\s*(.*)$", line)
    if not m:
        continue
    while stack and stack[-1][0] >= indent:
        stack.pop()
    key, value = m.group(2), m.group(3)
    stack.append((indent, key))
    if value == "":
        comment = []
        continue
    dotted = ".".join(k for _, k in stack)
    section = ".".join(k for _, k in stack[:2]) if stack[0][1] == "detectors" else stack[0][1]
    rows.setdefault(section, []).append((dotted, value, " ".join(comment)))
    comment = []

for section, items in rows.items():
    print(f"### `{section}`\n")
    print("| field | default | reload | meaning |")
    print("|---|---|---|---|")
    for dotted, value, text in items:
        text = text.replace("|", "\\|") or "See the field above."
        print(f"| `{dotted}` | `{value}` | {reload_class.get(dotted, '?')} | {text} |")
    print()
