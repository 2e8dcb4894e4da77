"""Specifications of study.py: its suites' configurations and the paired statistics behind the verdicts.

    python -m pytest -q test_study.py
"""
import math
import os

import numpy as np
import pytest

import data
import study
from configurator import read_config
from conftest import ROOT
from model import ModelConfig, build_model


def model_of(suite, run):
    """The settings of a suite's run's config file, as train.py reads them, and its model."""
    settings = read_config(os.path.join(ROOT, "config", f"{study.SUITES[suite]['config']}{run}.py"))
    return settings, build_model(ModelConfig(**{k: v for k, v in settings.items() if k in ModelConfig.flags()}))


@pytest.mark.parametrize("suite", sorted(study.SUITES))
def test_every_run_of_a_suite_has_a_config_on_the_suites_dataset(suite):
    for run in study.SUITES[suite]["runs"]:
        namespace, _ = model_of(suite, run)
        assert namespace["dataset"] == study.SUITES[suite]["dataset"], run


def test_gpt2_suite_matches_parameters_as_the_write_up_does():
    """Every encoder-decoder has at most the baseline's parameters; the smaller baseline has fewer than any of them."""
    params = {run: model_of("gpt2", run)[1].num_params() for run in study.SUITES["gpt2"]["runs"]}
    encoder_decoders = [run for run in params if "baseline" not in run]
    assert len(encoder_decoders) == 9
    assert all(params[run] <= params["baseline"] for run in encoder_decoders)
    assert all(params["smaller_baseline"] < params[run] for run in encoder_decoders)
    assert params["dropout_baseline"] == params["baseline_pos_sub"] == params["baseline"]


def test_gpt2_suite_changes_one_thing_at_a_time():
    configs = {run: model_of("gpt2", run)[1].config for run in study.SUITES["gpt2"]["runs"]}
    best = configs["encdec_mse_pos_sub"]
    assert (best.embedding_loss, best.embedding_loss_coeff, best.sub_pos_embed) == ("mse", 8.0, "yes")
    assert configs["encdec_mse_pos_sub_coeff1"].embedding_loss_coeff == 1.0
    assert configs["encdec_mse_pos_sub_fixed_ln"].embedding_ln_affine is False
    assert (configs["encdec_none"].embedding_loss, configs["encdec_none"].sub_pos_embed) == ("none", "no")
    assert configs["parallel"].variant == "parallel" and configs["parallel"].embedding_loss_coeff == 0.25
    assert configs["encdec_dropout"].dropout == configs["dropout_baseline"].dropout == 0.2


def log(*val_losses, train=1.0):
    return [{"iter": 10 * i, "val_loss": v, "train_loss": train} for i, v in enumerate(val_losses)]


def test_run_figures_take_the_best_and_the_last_evaluation():
    f = study.run_figures(log(5.0, 4.0, 4.5, 4.6, 4.4, train=3.0))  # evaluations at steps 0, 10, 20, 30, 40
    assert (f["best_val"], f["best_iter"], f["final_val"], f["final_train"]) == (4.0, 10, 4.4, 3.0)
    assert math.isclose(f["gap"], 1.4)
    assert math.isclose(f["late_val"], (4.6 + 4.4) / 2)  # steps 30 and 40: the last quarter


def test_paired_difference_uses_the_seeds_both_runs_have_with_a_t_interval():
    logs = {"baseline": {0: log(4.0), 1: log(4.2), 2: log(4.1), 3: log(9.0)},
            "other": {0: log(3.9), 1: log(4.0), 2: log(4.05)}}
    p = study.paired(logs, "other", "baseline", "best_val")
    d = np.array([-0.1, -0.2, -0.05])
    se = d.std(ddof=1) / math.sqrt(3)
    assert p["n"] == 3 and p["wins"] == 3
    assert math.isclose(p["mean"], d.mean()) and math.isclose(p["se"], se)
    assert np.allclose(p["ci"], (d.mean() - 4.303 * se, d.mean() + 4.303 * se))


def test_close_runs_are_those_whose_interval_holds_zero_which_covers_two_standard_errors():
    """Differences to the baseline -0.1, -0.12, -0.11 (se 0.006) are clear of zero, and so are +0.5, +0.4, +0.45;
    -0.1, -0.02, -0.06 is 2.6 se from zero but its interval (+-4.3 se) holds zero; -0.1, +0.1, -0.05 is within two
    standard errors."""
    logs = {"baseline": {0: log(4.0), 1: log(4.2), 2: log(4.1)},
            "tight": {0: log(3.9), 1: log(4.08), 2: log(3.99)},
            "outside_2se": {0: log(3.9), 1: log(4.18), 2: log(4.04)},
            "within_2se": {0: log(3.9), 1: log(4.3), 2: log(4.05)},
            "worse": {0: log(4.5), 1: log(4.6), 2: log(4.55)}}
    assert study.close_runs(logs, list(logs)[1:]) == ["outside_2se", "within_2se"]


def test_gpt2_long_suite_extends_runs_of_the_gpt2_suite():
    """The long runs are the gpt2 suite's configs trained past their own max_iters, so their first steps are those
    runs again (same data order per seed, learning rate still almost constant at the end)."""
    short, long = study.SUITES["gpt2"], study.SUITES["gpt2_long"]
    assert set(long["runs"]) <= set(short["runs"]) and long["runs"][0] == "baseline"
    assert (long["config"], long["dataset"], long["prepare"]) == (short["config"], short["dataset"], short["prepare"])
    for run in long["runs"]:
        namespace, _ = model_of("gpt2_long", run)
        assert long["max_iters"] >= 2 * namespace["max_iters"]
        assert namespace["lr_decay_iters"] > 10 * long["max_iters"]


def test_a_long_run_starts_from_the_finished_short_run_of_its_config_and_seed_only(tmp_path, monkeypatch):
    """A finished short run (log at its max_iters, checkpoint present) is copied to be resumed; an unfinished one,
    another seed, or a suite that extends nothing starts from scratch."""
    monkeypatch.setitem(study.SUITES, "short", dict(results=str(tmp_path / "short"), max_iters=20))
    monkeypatch.setitem(study.SUITES, "long", dict(results=str(tmp_path / "long"), max_iters=50, extends="short"))
    for seed, last in [(0, 20), (1, 10)]:
        src = tmp_path / "short" / f"baseline_seed{seed}"
        src.mkdir(parents=True)
        (src / "log.jsonl").write_text("".join(f'{{"iter": {i}, "val_loss": 5.0, "train_loss": 4.0}}\n'
                                               for i in range(0, last + 1, 10)))
        (src / "ckpt.pt").write_bytes(b"weights at step %d" % last)
    out = tmp_path / "long" / "baseline_seed0"
    assert study.start_from_shorter_run("long", "baseline", 0, str(out)) == 20
    assert (out / "ckpt.pt").read_bytes() == b"weights at step 20"
    records, torn = data.read_log(str(out / "log.jsonl"))
    assert records[-1]["iter"] == 20 and not torn
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt", "log.jsonl"]  # no temporary file left
    assert study.start_from_shorter_run("long", "baseline", 1, str(tmp_path / "long" / "baseline_seed1")) is None
    assert study.start_from_shorter_run("long", "baseline", 2, str(tmp_path / "long" / "baseline_seed2")) is None
    assert study.start_from_shorter_run("short", "baseline", 0, str(tmp_path / "other")) is None
    assert not (tmp_path / "long" / "baseline_seed1").exists() and not (tmp_path / "other").exists()
