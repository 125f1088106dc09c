#!/usr/bin/env python3
"""Every size a scenario's code reads (sk_size / sk_size_ns with a string
literal, or a ternary of two) is in its sizes table, and every size in the
table is read: sk_size() aborts on an undeclared name only when that line
runs (a thread-engine branch may not run here), and an unread size would make
--help print a number the run does not use.

    sizes_declared.py ROOT [SCENARIOS_DIR]   exit 1, naming each mismatch
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
scen = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else root / "scenarios"
CALL = re.compile(r"\bsk_size(?:_ns)?\(\s*run\s*,((?:[^()]|\([^()]*\))*)\)")
TABLE = re.compile(r"static const struct sk_size \w+\[\] = \{(.*?)\n\};", re.S)
ENTRY = re.compile(r'\{"([^"]+)",')

units = {}  # scenario -> list of its files (NAME.c, or the files of NAME/)
for p in sorted(scen.iterdir()):
    if p.name == "kit":
        continue
    if p.is_dir():
        units[p.name] = sorted(p.glob("*.c")) + sorted(p.glob("*.h"))
    elif p.suffix == ".c":
        units[p.stem] = [p]

bad = 0
for name, files in units.items():
    text = "\n".join(f.read_text() for f in files)
    declared = set()
    for t in TABLE.findall(text):
        declared |= set(ENTRY.findall(t))
    asked = set()
    for args in CALL.findall(text):
        lits = re.findall(r'"([^"]+)"', args)
        if not lits:
            print(f"{name}: sk_size called without a string literal: {args.strip()}")
            bad += 1
        asked |= set(lits)
    for n in sorted(asked - declared):
        print(f"{name}: the code asks for the size {n}, which its sizes table does not declare")
        bad += 1
    for n in sorted(declared - asked):
        print(f"{name}: the size {n} is declared but never read (sk_size)")
        bad += 1
print(f"sizes: {len(units)} scenarios, {bad} problems")
sys.exit(1 if bad else 0)
