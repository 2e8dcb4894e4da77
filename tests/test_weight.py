"""Specifications of lab/weight.py, the static measure of the code's weight: on a small made-up project whose every
figure is known, and on this repository, where its own per-file counts must add up.

    python -m pytest -q tests/test_weight.py
"""
import json
import subprocess
import sys

from conftest import ENV, ROOT
from lab import weight


def make_project(root):
    """train.py -> a.py; a.py imports b.py inside a function; b.py -> a.py (a circle); machinery/errors.py; files of
    tests/, lab/ and config/ and a test_*.py that are not the classroom; one line of 95 characters."""
    files = {
        "train.py": "import a\nfrom machinery import errors\nrun(globals())\nconfigure(globals())\n",  # 4 lines
        "a.py": "def f():\n    import b\n    return b\n",  # 3
        "b.py": "import a\n\n" + "x = '" + "y" * 89 + "'\n",  # 3 lines, the last of 95 characters
        "machinery/__init__.py": "\n",  # 1
        "machinery/errors.py": "import os\n",  # 1, a kind of code; os is not the project's
        "tasks/t.py": "import b\n",  # 1: the classroom, not what train.py imports
        "tests/test_x.py": "import a\n" * 50, "lab/tool.py": "import a\n" * 50, "config/c.py": "n = 1\n" * 50,
        "test_model.py": "import a\n" * 50,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_each_measure_of_a_made_up_project_is_its_known_figure(tmp_path):
    make_project(tmp_path)
    figures = weight.measure(str(tmp_path))
    assert figures["classroom_files"] == {"a.py": 3, "b.py": 3, "machinery/__init__.py": 1, "machinery/errors.py": 1,
                                          "tasks/t.py": 1, "train.py": 4}
    assert figures["classroom"] == 13
    # train.py, a.py (lazily: b.py), b.py, the machinery package and its module; not tasks/
    assert figures["train_closure_files"] == {"a.py": 3, "b.py": 3, "machinery/__init__.py": 1,
                                              "machinery/errors.py": 1, "train.py": 4}
    assert figures["machinery"] == 2
    assert figures["circles"] == [["a.py", "b.py"]] and figures["circles_count"] == 1
    assert figures["inner_imports"] == ["a.py:2"]
    assert figures["kind_named_modules"] == ["machinery/errors.py"]
    assert figures["globals_handed"] == ["train.py:3"]  # configure(globals()) is the configurator's
    lengths = [len(line) for text in ("import a", "from machinery import errors", "run(globals())",
                                      "configure(globals())", "def f():", "    import b", "    return b", "import a",
                                      "x = '" + "y" * 89 + "'", "import os", "import b") for line in [text]]
    assert figures["chars_per_line"] == round(sum(lengths) / len(lengths), 1)
    assert figures["share_91_100"] == round(100 / len(lengths), 1) and figures["over_100"] == 0


def test_a_project_without_circles_or_inner_imports_measures_none(tmp_path):
    (tmp_path / "train.py").write_text("import a\n")
    (tmp_path / "a.py").write_text("import os\n")
    figures = weight.measure(str(tmp_path))
    assert (figures["circles"], figures["inner_imports"], figures["machinery"]) == ([], [], 0)
    assert figures["train_closure"] == 2


def test_on_this_repository_the_totals_are_the_sums_of_the_files_it_reports():
    done = subprocess.run([sys.executable, "-m", "lab.weight", "--json"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    figures = json.loads(done.stdout)
    assert figures["classroom"] == sum(figures["classroom_files"].values()) > 0
    assert figures["train_closure"] == sum(figures["train_closure_files"].values())
    assert "train.py" in figures["train_closure_files"] and "model.py" in figures["train_closure_files"]
    assert set(figures["train_closure_files"]) <= set(figures["classroom_files"])
