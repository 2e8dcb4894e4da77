"""The notebooks run top to bottom in QUICK mode (as CI runs them) and draw their figures, leaving the project's
pictures as they were; their setup cell finds the project from any folder inside a clone, and outside one says in one
line what to do.

Each notebook in notebooks/ is executed in memory, with notebooks/ as the working directory; the committed
file, with the outputs of its full run, is never touched."""
import glob
import hashlib
import json
import os
import stat

import pytest

from conftest import ROOT

NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
CELL_TIMEOUT_S = 300


def picture_digests():
    """{path: sha256} of the pictures the README and lab/results.md show, which a notebook redraws only when asked."""
    paths = glob.glob(os.path.join(ROOT, "docs", "images", "*.png")) + glob.glob(os.path.join(ROOT, "lab", "figures",
                                                                                             "*.png"))
    return {path: hashlib.sha256(open(path, "rb").read()).hexdigest() for path in paths}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_in_quick_mode_without_errors_and_draws_figures(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (pip install nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient (pip install nbclient)")
    pytest.importorskip("ipykernel", reason="the notebook tests need a Python kernel (pip install ipykernel)")
    monkeypatch.setenv("QUICK", "1")  # the kernel inherits this environment
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOK_DIR}})
    pictures = picture_digests()
    client.execute()  # raises CellExecutionError, with the traceback, at the first failing cell
    assert picture_digests() == pictures, "a run changed the README's or results.md's pictures"
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), f"{os.path.basename(path)} drew no figure"


# -----------------------------------------------------------------------------
# the setup cell, outside the notebooks: its definitions run here, with a fake git and a fake python on PATH

def setup_cells():
    cells = {}
    for path in NOTEBOOKS:
        code = [cell for cell in json.load(open(path, encoding="utf-8"))["cells"] if cell["cell_type"] == "code"]
        cells[os.path.basename(path)] = "".join(code[0]["source"])
    return cells


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """The setup cell's definitions (everything before it calls find_project), and a bin/ folder on PATH where the
    tests put their fake git; each fake program appends its arguments and GIT_TERMINAL_PROMPT to calls.txt."""
    source = next(iter(setup_cells().values()))
    definitions, call = source.split("\nROOT = find_project(")
    namespace = {}
    exec(compile(definitions, "setup cell", "exec"), namespace)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("GIT_TERMINAL_PROMPT", raising=False)
    namespace["calls"] = tmp_path / "calls.txt"
    return namespace


def fake_program(path, calls, body):
    """A shell script that records its call, then runs body."""
    path.write_text(f'#!/bin/sh\necho "$(basename $0) $* prompt=$GIT_TERMINAL_PROMPT" >> {calls}\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def calls(setup):
    return setup["calls"].read_text().splitlines() if setup["calls"].exists() else []


def one_line_error(setup, start, colab, python=None):
    error = setup["SetupError"]
    with pytest.raises(error) as raised:
        setup["find_project"](str(start), colab, **({"python": python} if python else {}))
    line, = raised.value._render_traceback_()  # what Jupyter shows: this, no traceback
    assert line.startswith("error: ") and "\n" not in line
    return line


def test_every_notebook_has_the_same_setup_cell():
    cells = setup_cells()
    assert len(cells) == 3 and len(set(cells.values())) == 1, list(cells)


def test_setup_finds_the_project_from_any_folder_inside_it_and_runs_nothing(setup, tmp_path):
    fake_program(tmp_path / "bin" / "git", setup["calls"], "exit 1")
    starts = (ROOT, os.path.join(ROOT, "notebooks"), os.path.join(ROOT, "lab"), os.path.join(ROOT, "lab", "config"))
    for start in starts:
        assert setup["find_project"](start, colab=True) == ROOT
    assert calls(setup) == []


def test_setup_outside_a_clone_says_what_to_do_and_neither_clones_nor_installs(setup, tmp_path):
    fake_program(tmp_path / "bin" / "git", setup["calls"], "exit 1")
    python = fake_program(tmp_path / "bin" / "python", setup["calls"], "exit 0")
    elsewhere = tmp_path / "elsewhere" / "lab"  # someone else's model.py, and a lab/ folder, are not the project
    elsewhere.mkdir(parents=True)
    (elsewhere.parent / "model.py").write_text("print('not this project')\n")
    line = one_line_error(setup, elsewhere, colab=False, python=python)
    assert "git clone https://github.com/" in line and "notebooks/" in line
    assert calls(setup) == []


def test_setup_in_colab_offline_is_one_line_and_git_never_asks_for_a_password(setup, tmp_path):
    fake_program(tmp_path / "bin" / "git", setup["calls"],
                 "echo \"fatal: unable to access 'https://github.com/OWNER/REPO/': Could not resolve host\" >&2; "
                 "exit 128")
    line = one_line_error(setup, tmp_path, colab=True)
    assert "git clone" in line and "Could not resolve host" in line and "network" in line
    call, = calls(setup)
    assert call.startswith(f"git clone --depth=1 {setup['REPO_URL']} ") and call.endswith("prompt=0")
    assert not (tmp_path / "project").exists()


def test_setup_in_colab_refuses_a_leftover_folder_that_is_not_the_project(setup, tmp_path):
    fake_program(tmp_path / "bin" / "git", setup["calls"], "exit 1")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "model.py").write_text("")
    line = one_line_error(setup, tmp_path, colab=True, python=fake_program(tmp_path / "python", setup["calls"], ""))
    assert str(tmp_path / "project") in line and "remove or rename it" in line
    assert calls(setup) == []


def test_setup_in_colab_clones_then_installs_the_requirements_into_the_notebooks_python(setup, tmp_path):
    files = " ".join(f"$4/{name}" for name in (*setup["PROJECT_FILES"], "requirements.txt"))
    fake_program(tmp_path / "bin" / "git", setup["calls"], f"mkdir -p $4 && touch {files}")
    python = fake_program(tmp_path / "python", setup["calls"], "exit 0")
    assert setup["find_project"](str(tmp_path), colab=True, python=python) == str(tmp_path / "project")
    clone, install = calls(setup)
    requirements = tmp_path / "project" / "requirements.txt"
    assert clone.startswith("git clone")
    assert install == f"python -m pip install -q -r {requirements} matplotlib prompt=0"
    # a failed install: one line with pip's last words and the command to run by hand
    failing = fake_program(tmp_path / "python", setup["calls"], "echo 'ERROR: No matching distribution' >&2; exit 1")
    line = one_line_error(setup, tmp_path, colab=True, python=failing)
    assert "No matching distribution" in line and "pip install -r" in line
