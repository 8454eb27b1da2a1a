#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The call graph between the files of each devlend module, from `nm`.

Usage: call-graph.py [--table] [--doc FILE] [DIR]
       (DIR: the built mdev-kmod tree)

A file calls another when its object file has an undefined symbol that the
other's defines as code (nm type T). Inside one module the files must form
layers: the script prints every loop (a strongly connected group of files
and the calls that close it) and exits 1 if there is one. With --table it
also prints, per module, each file and the files it calls, lowest layer
first: the table docs/architecture.md shows. With --doc FILE it checks
that FILE (docs/architecture.md) holds that very table between the lines
`<!-- call-graph begin -->` and `<!-- call-graph end -->`, and that its
code map names every source file of the modules, so the picture cannot
drift from the tree.
"""

import os
import subprocess
import sys

# The modules built from a directory of files (Kbuild's dl_objs).
MODULES = ["fabric", "lender", "borrower", "ntb-emu"]


def symbols(obj):
    """(defined code symbols, undefined symbols) of one object file."""
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] == "T":
            defined.add(parts[2])
    return defined, undefined


def graph(top, module):
    """{file: {callee file: [symbols]}} for one module's directory."""
    d = os.path.join(top, module)
    # Only objects of sources still there: a file moved or removed leaves
    # its old object behind in a developer's tree.
    objs = sorted(f for f in os.listdir(d) if f.endswith(".o") and
                  os.path.exists(os.path.join(d, f[:-2] + ".c")))
    if not objs:
        sys.exit(f"call-graph: no object files in {d}: build the modules first")
    syms = {o[:-2]: symbols(os.path.join(d, o)) for o in objs}
    owner = {}
    for name, (defined, _) in syms.items():
        for s in defined:
            owner[s] = name
    edges = {name: {} for name in syms}
    for name, (_, undefined) in syms.items():
        for s in sorted(undefined):
            callee = owner.get(s)
            if callee and callee != name:
                edges[name].setdefault(callee, []).append(s)
    return edges


def sccs(edges):
    """Tarjan's strongly connected components, callees before callers."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


BEGIN, END = "<!-- call-graph begin -->", "<!-- call-graph end -->"


def doc_problems(doc, table_lines, top):
    """What FILE's table and code map miss, as a list of messages."""
    text = open(doc, encoding="utf-8").read()
    problems = []
    if BEGIN not in text or END not in text:
        return [f"{doc}: no {BEGIN} ... {END} block"]
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    shown = [l.rstrip() for l in block.splitlines()
             if l.strip() and not l.startswith("```")]
    if shown != table_lines:
        problems.append(f"{doc}: the call table differs from the tree's; "
                        "paste `make -C mdev-kmod callgraph`'s table")
    # The code map: each source file by its path, or by its name in its
    # directory's row.
    rows = [l for l in text.splitlines() if l.startswith("| `mdev-kmod/")]
    for d in sorted(os.listdir(top)):
        if not os.path.isdir(os.path.join(top, d)) or d in ("tests", "scripts"):
            continue
        for root, _, files in os.walk(os.path.join(top, d)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")) or f.endswith(".mod.c"):
                    continue
                rel = os.path.relpath(os.path.join(root, f), top)
                dirrow = [r for r in rows
                          if r.startswith(f"| `mdev-kmod/{os.path.dirname(rel)}/`")]
                if f"`mdev-kmod/{rel}`" not in text and not any(
                        f"`{f}`" in r for r in dirrow):
                    problems.append(f"{doc}: the code map does not name mdev-kmod/{rel}")
    return problems


def main():
    argv = sys.argv[1:]
    table = "--table" in argv
    doc = None
    if "--doc" in argv:
        i = argv.index("--doc")
        doc = argv[i + 1]
        del argv[i:i + 2]
    args = [a for a in argv if a != "--table"]
    top = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    loops = 0
    table_lines = []
    for module in MODULES:
        if not os.path.isdir(os.path.join(top, module)):
            continue
        edges = graph(top, module)
        comps = sccs(edges)
        table_lines.append(f"{module}/")
        for comp in comps:
            for f in comp:
                callees = ", ".join(sorted(edges[f])) or "-"
                table_lines.append(f"  {f + '.c':14} calls {callees}")
        for comp in comps:
            if len(comp) < 2:
                continue
            loops += 1
            print(f"LOOP in {module}/: {', '.join(c + '.c' for c in comp)}")
            for f in comp:
                for callee, syms in sorted(edges[f].items()):
                    if callee in comp:
                        print(f"    {f}.c -> {callee}.c: {', '.join(syms[:4])}"
                              + (" ..." if len(syms) > 4 else ""))
    if table:
        print("\n".join(table_lines))
    if doc:
        problems = doc_problems(doc, table_lines, top)
        for p in problems:
            print(p)
        if problems:
            return 1
    if loops:
        print(f"call-graph: {loops} loop(s) between files of one module")
        return 1
    print("call-graph: no loops between the files of any module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
