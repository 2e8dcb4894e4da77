"""Specifications of tasks/, the generated tasks: a task is one module, and train.py, sample.py and evaluate.py
serve it with no line of their own. A second task, written here into a copy of the project, is trained, sampled
and evaluated through the three scripts. CPU only, no network.

    python -m pytest -q tests/test_tasks.py
"""
import glob
import json
import os
import shutil

import pytest

import data
from conftest import ROOT, assert_one_line_error, run

# copying 1 to 3 digits: [START] x [SEP] x, the loss only on the copy
COPYING = '''"""Copying 1 to 3 digits: [START] x [SEP] x."""
import numpy as np
import torch

from machinery.process import fail

START = 10
SEP = 11
VOCAB_SIZE = 12
BLOCK_SIZE = 7
DEFAULTS = dict(n_layer=1, n_embed=32, n_head=2, batch_size=16, gradient_accumulation_steps=1, max_iters=4,
                learning_rate=1e-3, warmup_iters=1, lr_decay_iters=4, eval_interval=2, eval_iters=1,
                context_size=BLOCK_SIZE, vocab_size=VOCAB_SIZE)


def get_batch(split, size, rng):
    inputs = torch.zeros(size, BLOCK_SIZE, dtype=torch.long)
    targets = torch.full((size, BLOCK_SIZE), -1)
    for i in range(size):
        x = rng.integers(1, 10, size=rng.integers(1, 4)).tolist()
        seq = [START, *x, SEP, *x]
        inputs[i, :len(seq) - 1] = torch.tensor(seq[:-1])
        targets[i, len(x) + 1:2 * len(x) + 1] = torch.tensor(x)
    return inputs, targets


def score(model, split, device):
    xs = [[d] for d in range(1, 10)]
    right = 0
    for x in xs:
        out = model.generate(torch.tensor([[START, *x, SEP]], device=device), len(x), top_k=1)
        right += out[0, -len(x):].tolist() == x
    return right / len(xs), len(xs)


def prompts(start, num_samples, seed):
    if start is None:
        rng = np.random.default_rng(seed)
        xs = [rng.integers(1, 10, size=2).tolist() for _ in range(num_samples)]
    elif start.isdigit() and 1 <= len(start) <= 3 and "0" not in start:
        xs = [[int(c) for c in start]] * num_samples
    else:
        fail(f"the copying model takes 1 to 3 digits from 1 to 9, e.g. --start=123; got {start!r}")
    return [([START, *x, SEP], len(x)) for x in xs]


def show(prompt, answer):
    return "".join(map(str, prompt[1:-1])) + " copied as " + "".join(map(str, answer))
'''


def copy_of_the_project(folder):
    """The scripts and the modules they import, without the tests, notebooks and laboratory."""
    for path in glob.glob(os.path.join(ROOT, "*.py")):
        shutil.copy(path, folder)
    for package in ("machinery", "tasks"):
        shutil.copytree(os.path.join(ROOT, package), folder / package,
                        ignore=shutil.ignore_patterns("__pycache__"))


def test_a_second_task_is_one_module_trained_sampled_and_evaluated_by_the_three_scripts(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    copy_of_the_project(project)
    (project / "tasks" / "copying.py").write_text(COPYING)
    work = tmp_path / "work"
    work.mkdir()

    def script(name, *args, check=True):
        return run(os.path.join(project, name), *args, "--device=cpu", cwd=work, check=check)
    result = script("train.py", "--dataset=copying")
    assert result.stdout.startswith("copying: using its own defaults for n_layer=1, n_embed=32, ")
    assert "eval 4: train loss" in result.stdout and ", val accuracy " in result.stdout
    records = [json.loads(line) for line in open(work / "out" / "copying" / "log.jsonl")]
    assert [r["iter"] for r in records] == [0, 2, 4] and all(0 <= r["val_accuracy"] <= 1 for r in records)
    lines = script("sample.py", "--start=37").stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("37 copied as ") and len(lines[0].split()[-1]) == 2
    assert_one_line_error(script("sample.py", "--start=x", check=False), "the copying model takes 1 to 3 digits")
    result = json.loads(script("evaluate.py", "--out_dir=out/copying").stdout.splitlines()[-1])
    assert result["source"] == "copying held-out sequences" and result["sequences"] == 9
    assert result["accuracy"] == records[-1]["val_accuracy"]
    # and the reversal task is still found by name, not by a line of its own in the scripts
    assert data.load_task("reversal").DEFAULTS["max_iters"] == 400 and not data.is_task("tiny")


def test_the_three_scripts_name_no_task_beyond_their_examples():
    mentions = sum(open(os.path.join(ROOT, name)).read().count("reversal")
                   for name in ("train.py", "sample.py", "evaluate.py"))
    assert mentions <= 6


def test_a_run_trained_on_a_data_folder_is_what_its_checkpoint_records_beside_a_task_of_that_name(workdir, tmp_path):
    """With tasks/tiny.py beside data/tiny/, evaluate.py scored a run trained on the text as the task ("accuracy
    0.00%", exit 0): that run is resumed, evaluated and sampled as text, as its checkpoint records; a new run of that
    name is the task (prepare_wikipedia.py refuses to name a dataset after a task)."""
    project = tmp_path / "project"
    project.mkdir()
    copy_of_the_project(project)
    (project / "tasks" / "tiny.py").write_text(COPYING)
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    shutil.copytree(workdir / "out_full", tmp_path / "out_full")  # trained on the text of data/tiny
    result = run(os.path.join(project, "train.py"), "--dataset=tiny", "--out_dir=out_new", "--device=cpu",
                 "--max_iters=2", cwd=tmp_path, check=False)
    assert result.returncode == 0 and "tiny: using its own defaults" in result.stdout, result.stderr
    evaluated = run(os.path.join(project, "evaluate.py"), "--out_dir=out_full", "--device=cpu", cwd=tmp_path)
    assert "bits/byte" in evaluated.stdout and "accuracy" not in evaluated.stdout
    sampled = run(os.path.join(project, "sample.py"), "--out_dir=out_full", "--device=cpu", "--max_new_tokens=5",
                  cwd=tmp_path)
    assert " copied as " not in sampled.stdout
    run(os.path.join(project, "train.py"), "--out_dir=out_full", "--init_from=resume", "--max_iters=8",
        "--device=cpu", cwd=tmp_path)
    assert [r["iter"] for r in map(json.loads, open(tmp_path / "out_full" / "log.jsonl"))][-1] == 8


@pytest.mark.parametrize("module, fragment", [
    ("import numpy as np\nimport no_such_module\n", "does not import (ModuleNotFoundError: No module named "
                                                    "'no_such_module')"),
    ("DEFAULTS = dict(\n", "does not import (SyntaxError"),
    (COPYING.replace("def score(", "def accuracy("), "lacks score of the kind a task gives: DEFAULTS"),
    (COPYING.replace("DEFAULTS = ", "SETTINGS = ").replace("def show(", "def display("),
     "lacks DEFAULTS, show of the kind a task gives"),
    (COPYING + "\nDEFAULTS = 5\n", "lacks DEFAULTS of the kind a task gives"),
    (COPYING + "\nDEFAULTS = dict(n_layers=2)\n", "sets n_layers in DEFAULTS, which is no setting"),
    (COPYING + "\nVOCAB_SIZE = '12'\n", "lacks VOCAB_SIZE of the kind a task gives"),
    (COPYING + "\nBLOCK_SIZE = 0\n", "lacks BLOCK_SIZE of the kind a task gives"),
    (COPYING + "\nDEFAULTS = {1: 2}\n", "sets 1 in DEFAULTS, which is no setting"),
    ("import sys\nsys.exit(3)\n", "does not import (SystemExit: 3)"),
    (COPYING + "\nDEFAULTS = dict(DEFAULTS, overwrite=True)\n", "sets overwrite in DEFAULTS"),
    (COPYING + "\nDEFAULTS = dict(DEFAULTS, out_dir='elsewhere')\n", "sets out_dir in DEFAULTS"),
], ids=["import_error", "syntax_error", "no_score", "no_defaults", "defaults_not_a_dict", "unknown_defaults_key",
        "vocab_size_a_string", "block_size_0", "defaults_key_not_a_name", "exits", "overwrite", "out_dir"])
def test_a_task_module_that_does_not_import_or_lacks_a_name_is_one_line_before_anything_is_written(tmp_path, module,
                                                                                                    fragment):
    project = tmp_path / "project"
    project.mkdir()
    copy_of_the_project(project)
    (project / "tasks" / "broken.py").write_text(module)
    result = run(os.path.join(project, "train.py"), "--dataset=broken", "--device=cpu", cwd=tmp_path, check=False)
    assert_one_line_error(result, f"the task module {project / 'tasks' / 'broken.py'} ", fragment)
    assert os.listdir(tmp_path) == ["project"]  # no out/broken claimed, nothing written


def test_a_task_default_of_the_wrong_type_is_one_line_before_anything_is_written(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    copy_of_the_project(project)
    (project / "tasks" / "broken.py").write_text(COPYING + "\nDEFAULTS = dict(DEFAULTS, max_iters='400')\n")
    result = run(os.path.join(project, "train.py"), "--dataset=broken", "--device=cpu", cwd=tmp_path, check=False)
    assert_one_line_error(result, "max_iters='400' in tasks/broken.py's DEFAULTS has the wrong type")
    assert os.listdir(tmp_path) == ["project"]
