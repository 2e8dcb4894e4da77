"""Specifications of tasks/reversal.py, the zero-setup quick start: its sequences, its held-out split, and that train.py
(as the README shows it) and sample.py learn and decode it. CPU only, no network.

    python -m pytest -q tests/test_reversal.py
"""
import os
import re

import numpy as np
import torch

from tasks import reversal
from configurator import read_config
from conftest import ROOT, assert_one_line_error, log, run
from model import ModelConfig, build_model


def quick_start():
    """The README's quick start: its commands, the output it quotes, and the whole section."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme[readme.index("## Quick start"):]
    section = section[:section.index("\n## ")]
    return (*re.findall(r"```(?:bash)?\n(.*?)```", section, re.S)[:2], section)


def eval_lines(text):
    """{iteration: (train loss, val loss, val accuracy %)} of train.py's evaluation lines."""
    return {int(m[0]): tuple(map(float, m[1:])) for m in re.findall(
        r"^eval (\d+): train loss ([\d.]+), val loss ([\d.]+), val accuracy ([\d.]+)%$", text, re.M)}


def test_reversal_quick_start_trains_the_walkthroughs_small_model_as_the_readme_shows(tmp_path):
    """`python train.py --dataset=reversal` builds the walk-through's 2 + 2-layer encoder-decoder of width 64 and prints
    what the README quotes: its parameter count, and (cut short at 150 of its 400 steps, the learning rate unchanged)
    the first evaluations, to within float noise; the write-up's shape is one config file away."""
    commands, output, section = quick_start()
    assert re.search(r"^python train.py --dataset=reversal\s", commands, re.M)
    result = run("train.py", "--dataset=reversal", "--max_iters=150", "--device=cpu", cwd=tmp_path)
    first, params = result.stdout.splitlines()[:2]
    assert first.startswith("reversal: using its own defaults for n_layer=2, n_embed=64, n_head=4, seed=0, ")
    assert "max_iters" not in first  # given on the command line
    assert params.startswith("encdec: 235,328 parameters;") and params.split(";")[0] in output
    quoted, printed = eval_lines(output), eval_lines(result.stdout)
    assert sorted(printed) == [0, 50, 100, 150] and set(printed) <= set(quoted) and 400 in quoted
    for it, (train_loss, val_loss, accuracy) in printed.items():
        q = quoted[it]
        assert abs(train_loss - q[0]) < 0.01 and abs(val_loss - q[1]) < 0.01 and abs(accuracy - q[2]) < 1, (it, q)
    assert quoted[400][2] == 100.0  # the whole run writes back every held-out sequence, as in the walk-through
    assert "checkpoint and log in out/reversal/" in output and "--overwrite" in section
    records = log(tmp_path, os.path.join("out", "reversal"))  # its own default folder
    assert records[0]["val_accuracy"] == 0.0
    assert records[-1]["val_accuracy"] > 0.1  # chance: about 1 in 9 ** length, at most 1 in 81 on held-out sequences
    # the write-up's shape on this task: 13 + 13 layers of 150, 8,226,750 parameters
    settings = read_config(os.path.join(ROOT, "config", "reversal_paper.py"))
    flags = {k: v for k, v in {**reversal.DEFAULTS, **settings}.items() if k in ModelConfig.flags()}
    assert settings["dataset"] == "reversal" and build_model(ModelConfig(**flags)).num_params() == 8_226_750
    # sample.py finds the one out/*/ run; greedy decoding of one prompt has one answer, printed once
    result = run("sample.py", "--start=3 5 4", "--num_samples=3", "--device=cpu", cwd=tmp_path)
    assert result.stdout.startswith("3 5 4 -> ") and len(result.stdout.split("->")[1].split()) == 3
    assert len(result.stdout.splitlines()) == 1
    # without --start: a different random digit sequence per sample
    lines = run("sample.py", "--num_samples=4", "--device=cpu", cwd=tmp_path).stdout.splitlines()
    prompts = [line.split(" -> ")[0] for line in lines]
    assert len(lines) == 4 and len(set(prompts)) == 4
    assert all(len(line.split(" -> ")[1].split()) == len(prompt.split()) for line, prompt in zip(lines, prompts))


def test_reversal_targets_are_the_reversed_digits_only():
    inputs, targets = reversal.encode([np.array([3, 5, 4])])
    assert inputs[0].tolist() == [10, 3, 5, 4, 11, 4, 5, 3, 0, 0, 0]
    assert targets[0].tolist() == [-1, -1, -1, -1, 4, 5, 3, -1, -1, -1, -1]


def test_reversal_held_out_sequences_never_appear_in_training():
    train_sequences, held_out = reversal.split()
    for n in range(1, reversal.MAX_LEN + 1):
        seen = {tuple(x) for x in train_sequences[n]}
        assert not seen & {tuple(x) for x in held_out[n]}
        assert len(seen) + len(held_out[n]) == 9 ** n
    total = sum(len(x) for x in held_out.values())
    assert total == 480 and f"{total} held-out sequences" in open(os.path.join(ROOT, "README.md")).read()


class Reverser(torch.nn.Module):
    """A stand-in model whose next token is the prompt's digits reversed, but wrong as the first answer digit of every
    sequence that starts with a 1: (logits, None, None) as the model's forward without targets."""

    def forward(self, idx):
        logits = torch.zeros(len(idx), 1, reversal.VOCAB_SIZE)
        for row, seq in enumerate(idx.tolist()):
            sep = seq.index(reversal.SEP)
            x, written = seq[1:sep], seq[sep + 1:]
            digit = x[len(x) - 1 - len(written)]
            logits[row, 0, digit % 9 + 1 if x[0] == 1 and not written else digit] = 1.0
        return logits, None, None


def test_accuracy_is_the_share_of_sequences_whose_greedy_answer_is_the_reversed_digits():
    sequences = reversal.SEQUENCES["val"]
    right = sum(int((xs[:, 0] != 1).sum()) for xs in sequences.values())
    model = Reverser().train()
    assert reversal.accuracy(model, sequences, "cpu", batch_size=7) == right / sum(map(len, sequences.values()))
    assert model.training  # the mode it came in


def test_a_context_or_vocabulary_too_small_for_the_task_is_one_line_before_anything_is_written(tmp_path):
    for flag in ("--context_size=5", "--vocab_size=8"):
        result = run("train.py", "--dataset=reversal", flag, "--device=cpu", cwd=tmp_path, check=False)
        assert_one_line_error(result, "reversal needs context_size >= 11 and vocab_size >= 12, not ", "leave them")
        assert not (tmp_path / "out").exists()
