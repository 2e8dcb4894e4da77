"""Specifications of reversal.py, the zero-setup demo: its sequences, its held-out split, and that train.py and
sample.py learn and decode it. CPU only, no network.

    python -m pytest -q tests/test_reversal.py
"""
import numpy as np

import reversal
from conftest import log, run


def test_reversal_demo_learns_above_chance(tmp_path):
    result = run("train.py", "--dataset=reversal", "--n_layer=2", "--n_embed=64", "--n_head=4", "--max_iters=100",
                 "--eval_interval=50", "--device=cpu", cwd=tmp_path)
    assert "reversal: using its schedule for" in result.stdout and "max_iters" not in result.stdout.splitlines()[0]
    records = log(tmp_path, "out-reversal")  # its own default folder
    assert records[0]["val_accuracy"] == 0.0
    assert records[-1]["val_accuracy"] > 0.05  # chance: about 1 in 9 ** length, at most 1 in 81 on held-out sequences
    # sample.py finds the one out-*/ run; greedy decoding of one prompt has one answer, printed once
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
    assert sum(len(x) for x in held_out.values()) > 400
