"""How many lines a reader meets following one run of a script: every file of the project the run
imports, whole, less the full extent of every function and class none of whose lines ran (a
function that ran counts whole, its untaken branches and nested functions too: a reader reads
them; a class that ran loses the methods that did not).

    python -m lab.reading_lines train.py --dataset=reversal --max_iters=4 --out_dir=/tmp/r --overwrite
    python -m lab.reading_lines --json train.py config/cpu_baseline.py --dataset=mytext --max_iters=4

The run is traced at line level (sys.settrace) in this process, as `python SCRIPT ARGS...` runs it;
a file counts when it lies in the repository outside tests/ and lab/ (a config file a run executes
counts too). Prints one line per file and the total.
"""
import ast
import atexit
import json
import os
import runpy
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project_file(path, root=ROOT):
    """Is this a file of the project a reader of the run opens (not a test, not the laboratory)?"""
    path = os.path.abspath(path)
    if not path.startswith(root + os.sep) or not path.endswith(".py") or not os.path.isfile(path):
        return False
    top = os.path.relpath(path, root).split(os.sep)[0]
    return top not in ("tests", "lab")


def trace_run(script, args, root=ROOT):
    """Run `python script *args` here; return {file: set of line numbers that ran}, which fills
    until the interpreter ends (exit handlers run project code too)."""
    ran = {}

    def local(frame, event, arg):
        if event == "line":
            ran[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    def on_call(frame, event, arg):
        filename = frame.f_code.co_filename
        if not project_file(filename, root):
            return None  # no line events for torch, numpy, the standard library
        ran.setdefault(filename, set()).add(frame.f_lineno)
        return local

    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.settrace(on_call)
    threading.settrace(on_call)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"reading_lines: the run exited with {e.code!r}", file=sys.stderr)
    return ran


def unread_lines(tree, lines_ran):
    """Lines of the functions and classes none of whose lines ran, outermost first; within a
    function that ran, nothing."""
    unread = 0
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            # the body's lines: the def or class statement itself runs when the module loads
            body = range(node.body[0].lineno, node.end_lineno + 1)
            if not any(line in lines_ran for line in body):
                unread += node.end_lineno - first + 1
                continue
            if not isinstance(node, ast.ClassDef):  # a function that ran: read whole
                continue
        unread += unread_lines(node, lines_ran)
    return unread


def count(ran, root=ROOT):
    """{file relative to the repository: lines a reader meets} of a traced run."""
    counts = {}
    for filename, lines_ran in sorted(ran.items()):
        with open(filename, encoding="utf-8") as f:
            source = f.read()
        total = len(source.splitlines())
        counts[os.path.relpath(filename, root)] = total - unread_lines(ast.parse(source), lines_ran)
    return counts


if __name__ == "__main__":
    as_json = sys.argv[1:2] == ["--json"]
    argv = sys.argv[2:] if as_json else sys.argv[1:]
    if not argv:
        sys.exit("usage: python -m lab.reading_lines [--json] SCRIPT [ARGS...]")
    stdout = sys.stdout

    def report():  # registered first, so it runs after the run's own exit handlers
        sys.settrace(None)
        counts = count(ran)
        if as_json:
            print(json.dumps({"files": counts, "total": sum(counts.values())}), file=stdout)
            return
        for name, n in counts.items():
            print(f"{n:6d}  {name}", file=stdout)
        print(f"{sum(counts.values()):6d}  in all", file=stdout)

    atexit.register(report)
    sys.stdout = open(os.devnull, "w")  # the run's own output is not the point here
    ran = trace_run(argv[0], argv[1:])
