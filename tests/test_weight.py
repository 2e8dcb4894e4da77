"""Specifications of lab/weight.py, the static measure of the code's weight: on a made-up project whose every
figure is known, and on this repository, whose totals must be the sums of the files it reports.

    python -m pytest -q tests/test_weight.py
"""
import json
import subprocess
import sys

import pytest
from conftest import ENV, ROOT

from lab import weight

LONG = "x = '" + "y" * 89 + "'"  # 95 characters
LONGER = "z = '" + "y" * 95 + "'"  # 101 characters
PROJECT = {  # path: text; the classroom's files first, 22 lines
    "train.py": "import a\nfrom machinery import errors\nimport tasks.t\n\nrun(globals())\n"  # 8 lines
                "configure(globals(), {})\nglobals().update(errors.__dict__)\nsnapshot = dict(globals())\n",
    "a.py": "def f():\n    import b\n    import json\n    return b, json\n",  # b lazily; json: not the project's
    "b.py": f"import a\n{LONG}\n{LONGER}\n    \n",  # a circle: a.py -> b.py -> a.py; a blank line
    "configurator.py": "def configure(settings, defaults):\n    return settings\nshow(globals())\n",
    "machinery/__init__.py": '"""The machinery, whole."""\n',
    "machinery/errors.py": "import os\n",  # named for a kind of code
    "tasks/t.py": "import b\n",  # the classroom's, but a run loads its task by name
    # not the classroom's
    "test_model.py": "import a\nrun(globals())\n" * 20, "tasks/test_t.py": "import a\n",
    "tests/test_x.py": "import b\n" * 20, "tests/helper.py": "def h():\n    import a\n    run(globals())\n",
    "lab/tool.py": f"import a\n{LONGER}\nrun(globals())\n" * 20, "config/c.py": "n = 1\n" * 20,
    "notebooks/n.py": "import a\n", ".ci/check.py": "import a\n" * 20, "docs/notes.txt": "import a\n",
}


def make(root, files):
    """Write {path: text} under root."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


@pytest.fixture
def figures(tmp_path):
    """The measures of the made-up project."""
    make(tmp_path, PROJECT)
    return weight.measure(str(tmp_path))


def test_classroom_is_every_line_of_its_files_and_none_of_lab_tests_config_notebooks_hidden_or_test_files(figures):
    assert figures["classroom_files"] == {"a.py": 4, "b.py": 4, "configurator.py": 3, "machinery/__init__.py": 1,
                                          "machinery/errors.py": 1, "tasks/t.py": 1, "train.py": 8}
    assert figures["classroom"] == 22


def test_train_closure_follows_lazy_and_package_imports_and_leaves_out_tasks(figures):
    assert figures["train_closure_files"] == {"a.py": 4, "b.py": 4, "machinery/__init__.py": 1,
                                              "machinery/errors.py": 1, "train.py": 8}
    assert figures["train_closure"] == 18


def test_machinery_is_the_lines_of_its_folder_and_none_once_it_is_gone(figures, tmp_path):
    assert (figures["machinery"], figures["machinery_files"]) == (2, {"machinery/__init__.py": 1,
                                                                      "machinery/errors.py": 1})
    make(tmp_path / "gone", {"train.py": "import a\n", "a.py": "import os\n"})
    gone = weight.measure(str(tmp_path / "gone"))
    assert (gone["machinery"], gone["machinery_files"], gone["train_closure"]) == (0, {}, 2)


def test_two_modules_importing_each_other_are_one_circle(figures, tmp_path):
    assert (figures["circles"], figures["circles_count"]) == ([["a.py", "b.py"]], 1)
    make(tmp_path / "line", {"a.py": "import b\n", "b.py": "import c\n", "c.py": "import os\n"})
    assert weight.measure(str(tmp_path / "line"))["circles"] == []


def test_inner_imports_are_the_project_modules_imported_inside_a_function(figures):
    assert (figures["inner_imports"], figures["inner_imports_count"]) == (["a.py:2 b"], 1)


def test_inner_imports_reach_into_methods_and_their_blocks_but_not_into_module_level_blocks(tmp_path):
    make(tmp_path, {"n.py": "thing = 1\n", "machinery/__init__.py": "", "machinery/errors.py": "",
                    "m.py": "try:\n    import n\nexcept ImportError:\n    n = None\n\n\nclass C:\n"
                            "    def run(self):\n        if n:\n            from machinery import errors\n"
                            "            from n import thing\n        return errors, thing\n"})
    assert weight.measure(str(tmp_path))["inner_imports"] == ["m.py:10 machinery.errors", "m.py:11 n"]


def test_kind_named_modules_are_the_classroom_modules_named_for_a_kind_of_code(figures):
    assert figures["kind_named_modules"] == ["machinery/errors.py"]


def test_globals_handed_are_calls_given_globals_but_configure_update_dict_and_the_configurator(figures):
    assert figures["globals_handed"] == ["train.py:5"]


def test_globals_given_to_any_function_imported_from_the_configurator_is_not_handed_away(tmp_path):
    make(tmp_path, {"train.py": "from configurator import apply as put\nput(globals())\nshow(globals())\n"})
    assert weight.measure(str(tmp_path))["globals_handed"] == ["train.py:3"]


def test_line_widths_are_over_the_classrooms_non_blank_lines(figures):
    widths = [8, 28, 14, 14, 24, 33, 26, 8, 12, 15, 18, 8, 95, 101, 34, 19, 15, 27, 9, 8]  # 20 non-blank lines
    assert figures["chars_per_line"] == round(sum(widths) / 20, 1) == 25.8
    assert (figures["share_91_100"], figures["over_100"]) == (5.0, 1)  # 95: 1 of 20; 101: over


def test_a_line_of_91_to_100_characters_is_in_the_share_and_one_of_101_over(tmp_path):
    make(tmp_path, {"a.py": "".join("x" * n + "\n" for n in (90, 91, 0, 100, 101))})
    figures = weight.measure(str(tmp_path))
    assert (figures["chars_per_line"], figures["share_91_100"], figures["over_100"]) == (95.5, 50.0, 1)


def test_the_command_prints_a_table_or_one_json_object_of_another_root(tmp_path):
    make(tmp_path, PROJECT)
    command = [sys.executable, "-m", "lab.weight", "--root", str(tmp_path)]
    table = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60).stdout
    assert "classroom            22\n" in table and "circles              a.py, b.py\n" in table
    assert "inner_imports        a.py:2 b\n" in table and "classroom_files" not in table
    done = subprocess.run(command + ["--json"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout) == weight.measure(str(tmp_path))


def test_on_this_repository_the_totals_are_the_sums_of_the_files_it_reports():
    done = subprocess.run([sys.executable, "-m", "lab.weight", "--json"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120)
    figures = json.loads(done.stdout)
    assert figures["classroom"] == sum(figures["classroom_files"].values()) > 0
    assert figures["train_closure"] == sum(figures["train_closure_files"].values())
    assert figures["machinery"] == sum(figures["machinery_files"].values())
    assert {"train.py", "model.py"} <= set(figures["train_closure_files"]) <= set(figures["classroom_files"])
