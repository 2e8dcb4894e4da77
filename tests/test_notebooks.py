"""The notebooks run top to bottom in QUICK mode (as CI runs them) and draw their figures.

Each notebook in notebooks/ is executed in memory, with notebooks/ as the working directory; the committed
file, with the outputs of its full run, is never touched."""
import glob
import os

import pytest

from conftest import ROOT

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (pip install nbformat)")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient (pip install nbclient)")
pytest.importorskip("ipykernel", reason="the notebook tests need a Python kernel (pip install ipykernel)")

NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
CELL_TIMEOUT_S = 300


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_in_quick_mode_without_errors_and_draws_figures(path, monkeypatch):
    monkeypatch.setenv("QUICK", "1")  # the kernel inherits this environment
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": NOTEBOOK_DIR}})
    client.execute()  # raises CellExecutionError, with the traceback, at the first failing cell
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), f"{os.path.basename(path)} drew no figure"
