"""The weight of the project's code, read statically (nothing of it runs): the lines a reader can be
sent to, whole files counted, and how they hang together.

    python -m lab.weight           # a table
    python -m lab.weight --json    # one JSON object

classroom: every .py file outside lab/, tests/, config/, notebooks/ and test_*.py; train_closure:
every project file train.py can import, lazily or not (tasks/ left out: a run loads its task by
name); machinery: machinery/*.py; circles: import cycles among classroom files; inner_imports:
project modules imported inside a function; kind_named: modules named for a kind of code;
globals_handed: globals() passed to a call other than the configurator's; chars_per_line and
share_91_100: over the classroom's non-blank lines.
"""
import ast
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTSIDE = ("lab", "tests", "config", "notebooks")
KINDS = {"errors", "file_errors", "scripts", "utils", "util", "helpers", "helper", "misc", "common"}


def classroom(root):
    """The classroom's files, relative to root, sorted."""
    found = []
    for folder, subfolders, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        top = rel.split(os.sep)[0]
        subfolders[:] = [d for d in subfolders if not d.startswith((".", "__"))]
        if top in OUTSIDE:
            continue
        found += [os.path.normpath(os.path.join(rel, f)) for f in files
                  if f.endswith(".py") and not f.startswith("test_")]
    return sorted(found)


def resolve(module, root):
    """The project file a dotted module name is, or None (a third-party or standard module)."""
    base = os.path.join(root, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return os.path.relpath(path, root)
    return None


def imports(path, root):
    """[(project file imported, line, inside a function?)] of one file."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                # `from package import module` imports the module too, where it is one
                names = [child.module] + [f"{child.module}.{alias.name}" for alias in child.names]
            for name in names:
                parts = name.split(".")  # a.b.c imports a and a.b as well
                for i in range(1, len(parts) + 1):
                    target = resolve(".".join(parts[:i]), root)
                    if target and target != path:
                        found.append((target, child.lineno, in_function))
            visit(child, inner)
    with open(os.path.join(root, path), encoding="utf-8") as f:
        visit(ast.parse(f.read()), False)
    return found


def circles(graph):
    """The strongly connected components of two files or more (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def globals_handed(path, root):
    """Lines where globals() is an argument of a call other than configure(...)."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            handed = any(isinstance(a, ast.Call) and getattr(a.func, "id", None) == "globals"
                         for a in node.args)
            if handed and callee != "configure":
                lines.append(f"{path}:{node.lineno}")
    return lines


def measure(root=ROOT):
    """Every measure, as a dict."""
    files = classroom(root)
    lines = {path: open(os.path.join(root, path), encoding="utf-8").read().splitlines()
             for path in files}
    graph = {path: sorted({t for t, _, _ in imports(path, root) if t in lines}) for path in files}
    closure, todo = set(), ["train.py"]
    while todo:
        path = todo.pop()
        if path in closure or path.startswith("tasks" + os.sep) or path not in lines:
            continue
        closure.add(path)
        todo += graph[path]
    text = [line for path in files for line in lines[path] if line.strip()]
    machinery = {p: len(lines[p]) for p in files if p.startswith("machinery" + os.sep)}
    return {
        "classroom": sum(map(len, lines.values())),
        "classroom_files": {p: len(lines[p]) for p in files},
        "train_closure": sum(len(lines[p]) for p in closure),
        "train_closure_files": {p: len(lines[p]) for p in sorted(closure)},
        "machinery": sum(machinery.values()), "machinery_files": machinery,
        "circles": circles(graph), "circles_count": len(circles(graph)),
        "inner_imports": sorted({f"{p}:{line}" for p in files
                                 for _, line, inner in imports(p, root) if inner}),
        "kind_named_modules": [p for p in files if os.path.basename(p)[:-3] in KINDS],
        "globals_handed": [g for p in files if p != "configurator.py"
                           for g in globals_handed(p, root)],
        "chars_per_line": round(sum(map(len, text)) / len(text), 1),
        "share_91_100": round(100 * sum(91 <= len(line) <= 100 for line in text) / len(text), 1),
        "over_100": sum(len(line) > 100 for line in text),
    }


if __name__ == "__main__":
    figures = measure(sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else ROOT)
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            if not key.endswith("_files"):
                shown = len(value) if isinstance(value, list) and key != "circles" else value
                print(f"{key:20} {shown}")
