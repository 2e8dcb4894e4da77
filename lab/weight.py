"""The weight of the project's code, read statically (nothing of it is imported or run).

    python -m lab.weight                # a table: measure, value
    python -m lab.weight --json         # one JSON object (--root DIR: another project)

classroom: the lines of every .py file but test_*.py outside lab/, tests/, config/, notebooks/ and
hidden folders; train_closure: of every project file train.py can import, transitively, lazily or
not (tasks/ left out: a run loads its task by name); machinery: of machinery/*.py. circles: import
cycles among classroom files; inner_imports: project modules imported in a function; kind_named:
modules named for a kind of code (utils, errors...); globals_handed: calls given globals() but
configure(), .update(), dict(); chars_per_line, share_91_100 (%), over_100: non-blank line widths.
"""
import ast
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTSIDE = {"lab", "tests", "config", "notebooks"}  # at the top; hidden folders at any level
KINDS = {"errors", "file_errors", "scripts", "utils", "util", "helpers", "helper", "misc", "common"}
NOT_HANDED = {"configure", "update", "dict"}  # globals() given to the configurator, or copied


def read(root, path):
    """The text of one file, path relative to root."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def classroom(root):
    """The classroom's .py files, relative to root with "/" between folders, sorted."""
    found = []
    for folder, subfolders, files in os.walk(root):
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        subfolders[:] = [d for d in subfolders
                         if not d.startswith(".") and not (rel == "." and d in OUTSIDE)]
        found += [name if rel == "." else f"{rel}/{name}" for name in files
                  if name.endswith(".py") and not name.startswith("test_")]
    return sorted(found)


def resolve(root, module):
    """The project file a dotted module name is (a/b.py or a/b/__init__.py), or None."""
    base = module.replace(".", "/")
    return next((path for path in (base + ".py", base + "/__init__.py")
                 if os.path.isfile(os.path.join(root, path))), None)


def imports(root, path):
    """[(line, module, its files, inside a function?)] for each project module one file imports."""
    found = []

    def visit(node, inner):
        for child in ast.iter_child_nodes(node):
            names = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                # `from package import module` imports the module, and the package
                modules = [f"{child.module}.{alias.name}" for alias in child.names]
                names = [m for m in modules if resolve(root, m)] or [child.module]
            for name in names:
                parts = name.split(".")  # a.b.c imports a and a.b as well
                files = [resolve(root, ".".join(parts[:i])) for i in range(1, len(parts) + 1)]
                if any(files):
                    found.append((child.lineno, name, [f for f in files if f], inner))
            visit(child, inner or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    visit(ast.parse(read(root, path)), False)
    return found


def reachable(start, step):
    """Every node start reaches in one step or more; step(node) lists a node's next ones."""
    seen, todo = set(), list(step(start))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += step(node)
    return seen


def circles(graph):
    """The strongly connected components of two files or more of {file: [files]}, each sorted."""
    reach = {node: reachable(node, lambda n: graph.get(n, [])) for node in graph}
    found = {tuple(sorted({node} | {other for other in reach[node] if node in reach[other]}))
             for node in graph}
    return sorted(list(component) for component in found if len(component) > 1)


def globals_handed(root, path):
    """"path:line" of each call given globals() itself, other than the configurator's functions
    (configure, and any imported from configurator.py), .update and dict."""
    lines = []
    tree = ast.parse(read(root, path))
    configurators = {alias.asname or alias.name for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module == "configurator"
                     for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = getattr(node.func, "id", getattr(node.func, "attr", None))
            given = node.args + [keyword.value for keyword in node.keywords]
            if callee not in NOT_HANDED | configurators and any(
                    isinstance(a, ast.Call) and getattr(a.func, "id", None) == "globals"
                    and not a.args and not a.keywords for a in given):
                lines.append(node.lineno)
    return [f"{path}:{line}" for line in sorted(lines)]


def measure(root=ROOT):
    """Every measure, as a dict (the JSON object)."""
    files = classroom(root)
    lines = {path: read(root, path).splitlines() for path in files}
    found = {path: imports(root, path) for path in files}  # and other files', once read

    def step(path):
        """The project files one file imports, tasks/ left out."""
        found[path] = found[path] if path in found else imports(root, path)
        return sorted({f for _, _, fs, _ in found[path] for f in fs if not f.startswith("tasks/")})
    closure = {"train.py"} | reachable("train.py", step) if "train.py" in lines else set()
    folder = os.path.join(root, "machinery")
    machinery = [f"machinery/{n}" for n in os.listdir(folder) if n.endswith(".py")] \
        if os.path.isdir(folder) else []
    graph = {p: sorted({f for _, _, fs, _ in found[p] for f in fs if f in lines}) for p in files}
    inner = [f"{p}:{line} {name}" for p in files for line, name, _, inside in found[p] if inside]
    text = [line for path in files for line in lines[path] if line.strip()]
    return {
        "classroom": sum(map(len, lines.values())),
        "classroom_files": {path: len(lines[path]) for path in files},
        **weigh(root, "train_closure", closure), **weigh(root, "machinery", machinery),
        "circles_count": len(circles(graph)), "circles": circles(graph),
        "inner_imports_count": len(inner), "inner_imports": inner,
        "kind_named_modules": [p for p in files if p.rsplit("/", 1)[-1][:-3] in KINDS],
        "globals_handed": [place for path in files if path != "configurator.py"
                           for place in globals_handed(root, path)],
        "chars_per_line": round(sum(map(len, text)) / max(len(text), 1), 1),
        "share_91_100": round(100 * sum(91 <= len(x) <= 100 for x in text) / max(len(text), 1), 1),
        "over_100": sum(len(line) > 100 for line in text),
    }


def weigh(root, name, paths):
    """{name: their lines in all, name_files: {path: lines}} of some files."""
    counts = {path: len(read(root, path).splitlines()) for path in sorted(paths)}
    return {name: sum(counts.values()), f"{name}_files": counts}


def table(figures):
    """The measures as `measure  value` lines: a list one item a line, the *_files left out."""
    rows = []
    for key, value in figures.items():
        if isinstance(value, list):
            items = [", ".join(v) if isinstance(v, list) else v for v in value] or ["none"]
            rows += [f"{key if i == 0 else '':20} {item}" for i, item in enumerate(items)]
        elif not key.endswith("_files"):
            rows.append(f"{key:20} {value}")
    return "\n".join(rows)


def options(args):
    """(root, --json?) from the command line; anything else stops with the usage."""
    where = args.index("--root") + 1 if "--root" in args else None
    root = args[where] if where and where < len(args) else ROOT
    if where == len(args) or set(args) - {"--json", "--root", root} or not os.path.isdir(root):
        sys.exit(__doc__)
    return root, "--json" in args


if __name__ == "__main__":
    root, as_json = options(sys.argv[1:])
    figures = measure(root)
    print(json.dumps(figures, indent=1) if as_json else table(figures))
