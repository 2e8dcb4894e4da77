"""Specifications of study.py: its suites' configurations and the paired statistics behind the verdicts.

    python -m pytest -q tests/test_study.py
"""
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import prepare_wikipedia as pw
import data
from lab import study
from configurator import read_config
from conftest import (ASCII_WORDS, ENV, ROOT, assert_interrupted, assert_one_line_error, kill_all, run,
                      stops_at_their_defaults, word_articles)
from model import ModelConfig, build_model


def model_of(suite, run):
    """The settings of a suite's run's config file, as train.py reads them, and its model."""
    settings = read_config(os.path.join(ROOT, study.config_file(suite, run)))
    return settings, build_model(ModelConfig(**{k: v for k, v in settings.items() if k in ModelConfig.flags()}))


@pytest.mark.parametrize("suite", sorted(study.SUITES))
def test_every_run_of_a_suite_has_a_config_on_the_suites_dataset(suite):
    args = dict(arg[2:].split("=", 1) for arg in study.SUITES[suite].get("args", []))  # the suite's overrides
    for run in study.SUITES[suite]["runs"] + study.SUITES[suite].get("pictures", []):
        namespace, _ = model_of(suite, run)
        assert args.get("dataset", namespace["dataset"]) == study.SUITES[suite]["dataset"], run


def no_training(monkeypatch):
    """study.main with train.py and prepare_wikipedia.py stood in for: train.py fails at once, the preparation
    succeeds without writing anything; returns their commands."""
    commands = []

    class Process:  # stands for train.py: records its command, fails at once
        returncode = 1

        def __init__(self, cmd, **kw):
            commands.append(cmd)

        def communicate(self):
            return "stopped here", None
    monkeypatch.setattr(study.subprocess, "Popen", Process)
    monkeypatch.setattr(study.subprocess, "run", lambda cmd, **kw: commands.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0))
    return commands


def test_a_heldout_run_trains_with_the_suites_overrides_after_its_config(tmp_path, monkeypatch):
    commands = no_training(monkeypatch)
    study.train("gpt2_heldout", str(tmp_path), "baseline_slow", 3, 3000)
    cmd = commands[0]
    assert cmd[2] == "lab/config/cpu_gpt2_baseline_slow.py" and cmd[-3:] == study.SUITES["gpt2_heldout"]["args"]
    assert "--seed=3" in cmd and "--max_iters=3000" in cmd


def test_pick_lr_takes_the_rate_whose_train_curve_is_nearest_the_bare_encoder_decoders(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "ROOT", str(tmp_path))

    def write_log(folder, offset):
        os.makedirs(folder)
        with open(os.path.join(folder, "log.jsonl"), "w") as f:
            f.writelines(json.dumps({"iter": i, "train_loss": 6 - i / 400 + offset(i)}) + "\n"
                         for i in range(0, 1250, 50))
    write_log(tmp_path / "lab" / "results" / "gpt2_study" / "encdec_none_seed0", lambda i: 0)
    offsets = {0.002: lambda i: -i / 10000, 0.0015: lambda i: 0.02, 0.001: lambda i: 0.15}  # already trained
    for rate, offset in offsets.items():
        write_log(tmp_path / "lab" / "results" / "gpt2_lr_pick" / f"baseline_lr{rate:g}_seed0", offset)
    assert study.pick_lr(list(offsets), 1) == 0.0015


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


def next_steps_model(run):
    """A gpt2_next run's model at the suite's vocabulary (its --vocab_size override)."""
    settings, _ = model_of("gpt2_next", run)
    settings.update(study.parse_overrides(study.SUITES["gpt2_next"]["args"]))
    return build_model(ModelConfig(**{k: v for k, v in settings.items() if k in ModelConfig.flags()}))


def test_next_steps_split_eight_layers_and_add_rotary_positions_one_change_at_a_time():
    models = {run: next_steps_model(run) for run in study.SUITES["gpt2_next"]["runs"] + ["baseline", "encdec_none"]}
    c = {run: model.config for run, model in models.items()}
    assert study.SUITES["gpt2_next"]["args"] == study.SUITES["gpt2_heldout"]["args"]  # comparable with its runs
    splits = {run: (c[run].n_encoder_layer, c[run].n_decoder_layer) for run in ("encdec_none_2_6", "encdec_none",
                                                                                 "encdec_none_6_2")}
    assert list(splits.values()) == [(2, 6), (4, 4), (6, 2)]
    for run in splits:  # as in the write-up: an encoder-decoder has at most the baseline's parameters
        assert models[run].num_params() <= models["baseline"].num_params(), run
    assert [models[run].num_params() for run in splits] == [1_518_120, 1_489_080, 1_460_040]
    for run, sibling in (("baseline_rotary", "baseline"), ("encdec_none_rotary", "encdec_none")):
        assert c[run].rotary and not c[sibling].rotary and models[run].wpe is None
        assert models[run].num_params() == models[sibling].num_params()
        assert {k: v for k, v in vars(c[run]).items() if k != "rotary"} == \
            {k: v for k, v in vars(c[sibling]).items() if k != "rotary"}
    for run, sibling in (("baseline_rotary_pos_sub", "baseline_rotary"),
                         ("encdec_rotary_pos_sub", "encdec_none_rotary")):
        assert (c[run].sub_pos_embed, c[sibling].sub_pos_embed) == ("yes", "no") and c[run].rotary
        assert {k: v for k, v in vars(c[run]).items() if k != "sub_pos_embed"} == \
            {k: v for k, v in vars(c[sibling]).items() if k != "sub_pos_embed"}


def test_next_steps_summary_reads_its_references_from_the_heldout_suite_and_corrects_its_own_family(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(study.SUITES["gpt2_heldout"], "results", str(tmp_path / "heldout"))
    rng = np.random.default_rng(0)
    shift = {"baseline": 0.0, "encdec_none": 0.0, "encdec_none_2_6": -0.2, "encdec_none_6_2": 0.001}
    for run, folder in (("baseline", "heldout"), ("encdec_none", "heldout"), ("encdec_none_2_6", "next"),
                        ("encdec_none_6_2", "next")):
        for seed in range(5):
            write_log(tmp_path / folder / f"{run}_seed{seed}", [0, 1500, 3000],
                      suite={"heldout": "gpt2_heldout", "next": "gpt2_next"}[folder])
            path = tmp_path / folder / f"{run}_seed{seed}" / "log.jsonl"
            records = [json.loads(line) for line in open(path)]
            noise = rng.normal(0, 0.01)
            path.write_text("".join(json.dumps(dict(r, val_loss=r["val_loss"] + shift[run] + noise)) + "\n"
                                    for r in records))
    rows = study.with_holm(study.claim_rows("gpt2_next", study.summary("gpt2_next", str(tmp_path / "next"))))
    out = capsys.readouterr().out
    assert "| baseline | 5 |" in out and "| encdec_none_2_6 | 5 |" in out  # the references are in the table
    assert "Interim, not final: 4 of the suite's 6 runs have fewer than its 5 seeds (baseline_rotary 0," in out
    split = out.split("Where to split")[1].split("Rotary positions")[0]  # each run against the one it changes
    logs = study.summary("gpt2_next", str(tmp_path / "next"))
    for run, reference in (("encdec_none_2_6", "encdec_none"), ("encdec_none_6_2", "encdec_none")):
        p = study.paired(logs, run, reference, "late_val")
        line = next(line for line in split.splitlines() if line.startswith(f"| {run} | 5 |"))
        assert f"| {reference} | " in line and f"{p['mean']:+.4f} ({p['ci'][0]:+.4f}, {p['ci'][1]:+.4f})" in line
    assert {r["family"] for r in rows} == {"next steps"} and all(r["m"] == len(rows) for r in rows)
    assert len(rows) == 4 * 2  # the four split claims that have runs, at best and late val
    verdicts = {(r["claim"], r["figure"]): r["adjusted"] for r in rows}
    assert verdicts[("2 + 6 layers beat 4 + 4", "best_val")] == "holds"
    assert verdicts[("6 + 2 layers beat 4 + 4", "late_val")] == "not detected"


def test_heldout_summary_tests_the_control_and_reports_the_loss_without_test_only_ids(tmp_path, capsys):
    """The baseline that fits as slowly is 0.2 lower from step 1,500 on, the others equal the baseline up to noise:
    only the control's claim holds; the primary family has its own correction, and the second table is the val loss
    without the ids that never occur in training."""
    rng = np.random.default_rng(0)
    for run in study.SUITES["gpt2_heldout"]["runs"]:
        for seed in range(5):
            noise = rng.normal(0, 0.01)
            records = [{"iter": i, "train_loss": 5 - i / 1000, "val_loss": 6 - i / 2000 + noise
                        - 0.2 * (run == "baseline_slow" and i >= 1500), "val_loss_seen_ids": 0}
                       for i in range(0, 3001, 100)]
            records = [dict(r, val_loss_seen_ids=r["val_loss"] - 0.4) for r in records]  # the same, 0.4 lower
            os.makedirs(tmp_path / f"{run}_seed{seed}")
            (tmp_path / f"{run}_seed{seed}" / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            write_record(tmp_path / f"{run}_seed{seed}", "gpt2_heldout")
    logs = study.summary("gpt2_heldout", str(tmp_path))
    out = capsys.readouterr().out
    assert "Interim" not in out  # every run has all its seeds
    table, seen_table = out.split("never occurs in training")
    late = study.paired(logs, "baseline_slow", "baseline", "late_val")
    assert late["mean"] < -0.19 and f"{late['mean']:+.4f} ({late['ci'][0]:+.4f}, {late['ci'][1]:+.4f})" in seen_table
    for run in logs:
        f = study.run_figures(logs[run][0])
        assert math.isclose(f["late_val_seen_ids"], f["late_val"] - 0.4) and f"| {run} | 5 |" in seen_table
    rows = study.with_holm(study.claim_rows("gpt2_heldout", logs))
    primary = [r for r in rows if r["family"] == "primary"]
    assert len(primary) == 6 and all(r["m"] == 6 for r in primary)  # two claims, three figures
    verdicts = {(r["claim"], r["figure"]): r.get("adjusted") for r in rows}
    control = {"a baseline that fits as slowly beats the baseline": "holds",
               "the bare encoder-decoder beats a baseline that fits as slowly": "contradicted",
               "MSE (x1) + pos sub beats a baseline that fits as slowly": "contradicted"}
    assert {key: v for key, v in verdicts.items() if v not in ("not detected", None)} == \
        {(claim, figure): v for claim, v in control.items() for figure in ("best_val", "late_val", "final_val")}


def test_next_steps_trains_one_seed_of_each_pictures_run_first_then_its_runs_seed_by_seed(tmp_path, monkeypatch):
    batches = []
    monkeypatch.setattr(study, "run_all", lambda suite, results, jobs, *args: batches.append(jobs) or 0)
    monkeypatch.setattr(study.subprocess, "run", lambda *args, **kw: subprocess.CompletedProcess(args, 0))  # data
    assert study.main(["--suite=gpt2_next", f"--results={tmp_path}"]) == 0
    assert batches[0] == [("baseline_pos_sub", 0), ("encdec_pos_sub", 0), ("encdec_mse", 0)]
    runs = study.SUITES["gpt2_next"]["runs"]
    assert batches[1] == [(run, seed) for seed in range(5) for run in runs] and len(batches) == 2


def test_a_study_whose_runs_are_all_done_says_so_and_how_to_train_it_again(tmp_path, monkeypatch, capsys):
    """As from a fresh clone, where the committed logs make every run done: the study says so and names --results,
    and neither prepares data nor trains anything."""
    suite = study.SUITES["byte"]
    for run_ in suite["runs"]:
        for seed in suite["seeds"]:
            write_log(tmp_path / f"{run_}_seed{seed}", [0, 100, suite["max_iters"]], suite="byte")
    monkeypatch.setattr(study.subprocess, "run", lambda *args, **kw: pytest.fail("data was prepared"))
    monkeypatch.setattr(study.subprocess, "Popen", lambda *args, **kw: pytest.fail("a run was trained"))
    assert study.main(["--suite=byte", f"--results={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "every run of the byte study is done" in out and "--results=NEW_FOLDER" in out and "--summary" in out
    assert "done before" not in out  # nothing else to do: not even the data a run would need


def test_time_figures_come_from_the_dry_run_alone():
    """--help (the docstring) names no duration to contradict the dry run; the dry run times each configuration as the
    study runs it (one thread on a CPU) and counts, as an upper bound, the seeds added where three cannot decide."""
    assert not re.search(r"\d+(\.\d+)? ?(h|hours?|min|minutes)\b", study.__doc__), study.__doc__


def test_dry_run_times_a_cpu_run_on_one_thread_and_bounds_the_extra_seeds(monkeypatch, capsys):
    import torch
    from lab import bench
    threads = []

    class Trainer:  # stands for the benchmark's: one step takes a second, on as many threads as it is given
        def __init__(self, *args):
            pass

        def step(self):
            threads.append(torch.get_num_threads())
            return 1.0
    monkeypatch.setattr(bench, "Trainer", Trainer)
    monkeypatch.setattr(study, "dataset_meta", lambda settings: {})  # whatever is prepared here
    before = torch.get_num_threads()
    _, hours = study.plan("gpt2", ["baseline", "encdec_none"], [0, 1, 2], [], None, 2, True, extra_seeds=[3, 4])
    assert set(threads) == {1} and torch.get_num_threads() == before
    out = capsys.readouterr().out
    assert hours == pytest.approx(2 * 3 * 1200 / 3600)  # 2 x 3 runs of 1,200 steps of 16 x 128 tokens, a second each
    assert f"about {hours / 2:.1f} h; up to {hours / 3 * 2 / 2:.1f} h more for seeds [3, 4]" in out
    assert "the evaluations are not counted until data/wikitext2_valid_gpt2c is prepared" in out


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
    t = study.t_quantile(0.95, 2)  # 4.303
    assert np.allclose(p["ci"], (d.mean() - t * se, d.mean() + t * se))


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
    records, torn = study.read_log(str(out / "log.jsonl"))
    assert records[-1]["iter"] == 20 and not torn
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt", "log.jsonl"]  # no temporary file left
    assert study.start_from_shorter_run("long", "baseline", 1, str(tmp_path / "long" / "baseline_seed1")) is None
    assert study.start_from_shorter_run("long", "baseline", 2, str(tmp_path / "long" / "baseline_seed2")) is None
    assert study.start_from_shorter_run("short", "baseline", 0, str(tmp_path / "other")) is None
    assert not (tmp_path / "long" / "baseline_seed1").exists() and not (tmp_path / "other").exists()


def test_t_quantiles_and_p_values_match_the_printed_table():
    """t_quantile and t_two_sided_p (closed form, no scipy) against the 95% two-sided t table and one 99% value."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
    for df, t in table.items():
        assert abs(study.t_quantile(0.95, df) - t) < 6e-4, df
        assert abs(study.t_two_sided_p(t, df) - 0.05) < 1e-4, df
    assert abs(study.t_quantile(0.99, 4) - 4.604) < 1e-3
    assert study.t_two_sided_p(0.0, 3) == 1.0 and study.t_two_sided_p(-2.776, 4) == study.t_two_sided_p(2.776, 4)


def test_holm_steps_down_and_stops_at_the_first_p_above_its_level():
    """p 0.005, 0.01, 0.03, 0.04 (m = 4) against 0.05/4, 0.05/3, 0.05/2, 0.05/1: the first two are rejected, the
    third is not (0.03 > 0.025), so neither is the fourth, though 0.04 < 0.05 alone."""
    out = study.holm([0.01, 0.04, 0.03, 0.005])
    assert [rank for rank, _, _ in out] == [2, 4, 3, 1]
    assert np.allclose([p for _, p, _ in out], [0.03, 0.06, 0.06, 0.02])
    assert np.allclose([level for _, _, level in out], [1 - 0.05 / 3, 1 - 0.05 / 2, 1 - 0.05 / 2, 1 - 0.05 / 4])


def family_logs(differences):
    """Synthetic logs: a baseline and one run per list of seed-wise val-loss differences to it."""
    base = [5.0, 5.2, 4.9, 5.1, 5.05]
    logs = {"baseline": {s: log(v) for s, v in enumerate(base)}}
    for name, d in differences.items():
        logs[name] = {s: log(base[s] + x) for s, x in enumerate(d)}
    return logs


def rows_of(logs, runs, writeup=-0.05):
    return study.with_holm([dict(family="f", claim=run, a=run, b="baseline", figure="best_val", writeup=writeup,
                                 **study.paired(logs, run, "baseline", "best_val")) for run in runs])


def test_a_raw_significant_claim_is_not_detected_after_holm_in_a_family_of_two():
    """One comparison with p between 0.025 and 0.05 holds alone, and no longer in a family with a null one; the verdict
    then gives the effects its adjusted interval allows, and whether that interval holds the write-up's."""
    logs = family_logs({"a": [-0.06, -0.02, -0.05, -0.08, 0.0], "null": [0.03, -0.04, 0.05, -0.02, 0.01]})
    alone, = rows_of(logs, ["a"])
    assert 0.025 < alone["p"] < 0.05 and alone["raw"] == alone["adjusted"] == "holds" and study.words(alone) == "holds"
    a, null = rows_of(logs, ["a", "null"])
    assert a["raw"] == "holds" and a["adjusted"] == "not detected" and a["p_adj"] == min(1, 2 * a["p"])
    assert a["ci_adj"][0] < a["ci"][0] < a["ci"][1] < 0 < a["ci_adj"][1]
    low, high = a["ci_adj"]
    assert study.words(a).startswith(f"not detected; the adjusted interval allows {low:+.3f} to {high:+.3f}")
    assert "including the write-up's -0.050" in study.words(a)
    assert "excluding the write-up's -0.200" in study.words(rows_of(logs, ["a", "null"], writeup=-0.2)[0])


def test_a_claim_holds_or_is_contradicted_exactly_when_holm_rejects_it():
    """Over random families: the adjusted interval excludes zero if and only if the Holm-adjusted p is below 0.05, and
    its sign gives the word (below zero: holds; above: contradicted)."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        runs = {f"r{i}": list(rng.normal(rng.normal(0, 0.05), 0.03, 5)) for i in range(rng.integers(2, 8))}
        for row in rows_of(family_logs(runs), list(runs)):
            rejected = row["p_adj"] <= 0.05
            assert (row["adjusted"] != "not detected") == rejected, row
            if rejected:
                assert row["adjusted"] == ("holds" if row["mean"] < 0 else "contradicted")


def curve_log(train, val, every=10):
    return [{"iter": every * i, "train_loss": t, "val_loss": v} for i, (t, v) in enumerate(zip(train, val))]


def test_matched_train_loss_tells_fitting_more_slowly_from_overfitting_more_slowly():
    """Val loss as one U-shaped function of train loss. A run that follows it at half the speed ends with a lower val
    loss (it is less far down the U) yet matches the baseline at equal train loss; a run with the baseline's train loss
    and a val loss 0.1 lower from train loss 4.5 on is lower there."""
    steps = np.arange(200)
    u = lambda train: 5.0 + 0.5 * (train - 4.5) ** 2

    def logs_for(seeds):
        logs = {"baseline": {}, "slower": {}, "overfits_less": {}}
        for s in seeds:
            fast, slow = 6.0 - 3.0 * steps / 200 + 0.01 * s, 6.0 - 1.5 * steps / 200 + 0.01 * s
            logs["baseline"][s] = curve_log(fast, u(fast))
            logs["slower"][s] = curve_log(slow, u(slow))
            logs["overfits_less"][s] = curve_log(fast, u(fast) - 0.1 * (fast < 4.5) * (1 + 0.01 * s))
        return logs

    logs = logs_for(range(3))
    assert study.paired(logs, "slower", "baseline", "final_val")["mean"] < -0.5
    slower = dict(study.fit_or_overfit(logs, "slower", "baseline", [5.0, 4.6]))
    less = dict(study.fit_or_overfit(logs, "overfits_less", "baseline", [5.0, 4.2]))
    assert abs(slower["val at train loss 4.6"]["mean"]) < 1e-3
    assert abs(slower["val at its own final train loss"]["mean"]) < 1e-3
    assert abs(less["val at train loss 5.0"]["mean"]) < 1e-9 and less["val at train loss 4.2"]["ci"][1] < -0.09


def test_step_at_interpolates_the_first_crossing_and_value_at_reads_between_evaluations():
    log_ = curve_log([5.0, 4.0, 4.5, 3.0], [6.0, 5.0, 5.5, 7.0])  # steps 0, 10, 20, 30
    assert study.step_at(log_, 4.5) == 5.0  # the first time down to 4.5, not step 20
    assert study.step_at(log_, 2.0) is None
    assert study.value_at(log_, 25.0) == 6.25


def test_smoothed_best_is_the_minimum_of_a_centred_moving_average_and_is_above_a_noisy_minimum():
    noisy = log(5.0, 4.8, 5.0, 4.6, 5.0, 4.8, 5.0)  # alternating noise around a flat bottom
    assert study.run_figures(noisy)["best_val"] == 4.6
    assert math.isclose(study.smoothed_best(noisy, k=3), (4.8 + 5.0 + 4.6) / 3)
    assert study.smoothed_best(noisy, k=1) == 4.6


def test_bigram_probabilities_sum_to_one_for_every_context_including_unseen_ids():
    """Ids 5 and 6 never occur in training: as context (backing off) and as next token (the uniform floor), every
    conditional distribution of the Kneser-Ney bigram still sums to one."""
    train = np.random.default_rng(0).integers(0, 5, 300)
    for v in range(7):
        total = sum(math.exp(-study.bigram_loss(train, [v, w], 7)) for w in range(7))
        assert math.isclose(total, 1.0, rel_tol=1e-9), v
    assert study.bigram_loss(train, [0, 6], 7) > study.bigram_loss(train, [0, 1], 7)


# -----------------------------------------------------------------------------
# the paper suite


def test_paper_suite_is_the_write_ups_table_at_its_configurations_on_cuda_bf16_compiled():
    suite = study.SUITES["paper"]
    assert sorted(suite["runs"]) == sorted(study.WRITE_UP_RUNS) and suite["runs"][:3] == [
        "baseline", "encdec_none", "encdec_mse_pos_sub"]  # the primary comparisons first
    assert suite["seeds"] == [0, 1, 2]
    assert {"--device=cuda", "--dtype=bfloat16", "--compile=True"} <= set(suite["args"])
    assert data.prepare_command(suite["dataset"]) == "python prepare_wikipedia.py --wikitext103"
    params = {run: study.run_cost(study.run_settings("paper", run), 9000)[0] for run in suite["runs"]}
    assert (params["baseline"], params["smaller_baseline"], params["encdec_mse_pos_sub"]) == (
        16_036_800, 15_441_192, 15_763_500)  # the write-up's tables, with GPT-2's vocabulary


def test_cost_counts_training_and_evaluation_flops_of_the_run():
    settings = study.run_settings("paper", "baseline")
    params, per_token, flops = study.run_cost(settings, 9000)
    train_tokens = 9000 * 50 * 16 * 200
    eval_tokens = 19 * 2 * 200 * 50 * 200  # steps 0, 500, ..., 9000; train and val
    assert math.isclose(flops, per_token * (train_tokens + eval_tokens / 3))
    assert 1.5e17 < flops < 1.6e17


def test_cost_of_a_cpu_run_counts_every_val_token_and_512_train_windows_per_evaluation(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "ROOT", str(tmp_path))  # a prepared dataset of 64,000 val tokens, and the configs
    shutil.copytree(os.path.join(ROOT, "config"), tmp_path / "config")
    shutil.copytree(os.path.join(ROOT, "lab", "config"), tmp_path / "lab" / "config")
    os.makedirs(tmp_path / "data" / "wikitext2_valid-test_gpt2c")
    (tmp_path / "data" / "wikitext2_valid-test_gpt2c" / "meta.json").write_text('{"vocab_size": 18013, '
                                                                                 '"val_tokens": 64000}')
    settings = study.run_settings("gpt2_next", "encdec_none_2_6")  # eval_iters=0, every 100 steps, 128 tokens
    params, per_token, flops = study.run_cost(settings, 3000)
    assert params == 1_518_120
    per_eval = 64000 + 500 * 128  # 500 windows of val: all of them, and as many of train
    assert math.isclose(flops, per_token * (3000 * 16 * 128 + 31 * per_eval / 3))


def test_jobs_on_gpus_each_see_only_their_own_and_never_share_one(tmp_path, monkeypatch):
    running, seen = set(), []

    def fake_train(suite, results, run, seed, max_iters, overrides, gpu):
        assert gpu not in running  # a GPU runs one job at a time
        running.add(gpu)
        seen.append(gpu)
        running.discard(gpu)
        return "ok", {"train_loss": 1.0, "val_loss": 1.0}
    monkeypatch.setattr(study, "train", fake_train)
    jobs = [(run, seed) for seed in range(3) for run in ("baseline", "encdec_none")]
    assert study.run_all("paper", str(tmp_path), jobs, 2, 1, ["--device=cuda"], ["4", "6"]) == 0
    assert len(seen) == 6 and set(seen) <= {"4", "6"}


def test_paper_dry_run_prints_the_plan_and_its_cost_without_a_gpu():
    result = run("lab/study.py", "--suite=paper", "--dry_run", cwd=ROOT, env={"CUDA_VISIBLE_DEVICES": ""})
    assert "24 runs of 9,000 steps" in result.stdout and "| encdec_cosine | 15,763,500 |" in result.stdout
    # hours from tokens/s measured on a named GPU: 9,000 steps of 160,000 tokens (and the evaluations) at each
    assert "| baseline | 16,036,800 | 106.2 | 155.6 | 304,198 | 1.34 |" in result.stdout
    assert "| encdec_mse_pos_sub | 15,763,500 | 108.6 | 159.2 | 142,677 | 2.85 |" in result.stdout
    assert ("measured on one NVIDIA H200 (torch 2.11, micro-batch 50 x 200, bf16: baseline compiled 304,198; encdec "
            "eager 142,677): 54.8 H200 GPU-hours") in result.stdout and "MFU" not in result.stdout
    result = run("lab/study.py", "--suite=paper", cwd=ROOT, env={"CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert_one_line_error(result, "no GPU is visible", "--dry_run", "--device=cpu")


PROJECT = ["lab/study.py", "train.py", "model.py", "data.py", "text.py", "configurator.py", "machinery", "tasks",
           "evaluate.py", "lab/bench.py", "prepare_wikipedia.py"]
TINY_PAPER = ["--seeds=2", "--max_iters=2", "--results=smoke", "--device=cpu", "--dtype=float32", "--compile=False",
              "--n_layer=1", "--n_embed=60", "--context_size=32", "--batch_size=2", "--gradient_accumulation_steps=1",
              "--eval_interval=1", "--eval_iters=2", "--warmup_iters=1"]


def test_paper_suite_smoke_run_on_the_cpu_every_configuration_then_its_summary(tmp_path):
    """The paper suite's own code path at a tiny width: a copy of the project prepares its data from local text,
    prints the plan at the throughput it measures, trains every configuration for 2 steps with 2 seeds, resumes
    nothing it has finished, and summarises next to the write-up's figures."""
    os.makedirs(tmp_path / "lab")
    for name in PROJECT:
        copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
        copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(os.path.join(ROOT, "config"), tmp_path / "config")
    shutil.copytree(os.path.join(ROOT, "lab", "config"), tmp_path / "lab" / "config")
    (tmp_path / "text.txt").write_text(word_articles(ASCII_WORDS, 20, 150))

    def study_copy(*args):  # the copy's own study.py, so that its data/ and results are in tmp_path
        result = subprocess.run([sys.executable, "lab/study.py", "--suite=paper", *args, *TINY_PAPER], cwd=tmp_path,
                                env={**ENV, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        return result.stdout
    out = study_copy("--input=text.txt")
    assert "16 runs into smoke/" in out and "measured tokens/s" in out and "FAILED" not in out
    for run_ in study.SUITES["paper"]["runs"]:
        assert f"| {run_} |" in out.split("total:")[0]
        for seed in (0, 1):
            log = str(tmp_path / "smoke" / f"{run_}_seed{seed}" / "log.jsonl")
            assert study.read_log(log)[0][-1]["iter"] == 2
    assert "every run of the paper study is done in smoke/" in study_copy()  # resumes nothing it has finished
    table = study_copy("--summary")
    assert "| encdec_mse_pos_sub | 2 | 3.378 |" in table and "| baseline | 2 | 3.424 |" in table
    assert ("| primary | the best encoder-decoder beats the baseline | encdec_mse_pos_sub - baseline | late_val | 2 |"
            in table)


def write_record(folder, suite="gpt2", overrides=()):
    """The study.json the suite's study writes into the folder of one of its runs (<run>_seed<N>) before training."""
    os.makedirs(folder, exist_ok=True)
    run_ = os.path.basename(folder).rsplit("_seed", 1)[0]
    with open(os.path.join(folder, "study.json"), "w") as f:
        json.dump(study.run_record(suite, run_, overrides), f)


def write_log(folder, iters, last_line="", suite="gpt2", overrides=()):
    """A run's log at iters, and the study.json of the suite's run (its study's, trained with overrides; suite None:
    none)."""
    os.makedirs(folder)
    with open(os.path.join(folder, "log.jsonl"), "w") as f:
        f.writelines(json.dumps({"iter": i, "train_loss": 5 - i / 1000, "val_loss": 6 - i / 2000}) + "\n"
                     for i in iters)
        f.write(last_line)
    if suite:
        write_record(folder, suite, overrides)


def test_summary_drops_a_torn_last_line_and_names_a_corrupt_one(tmp_path, capsys):
    for run in ("baseline", "encdec_none"):
        for seed in (0, 1):
            write_log(tmp_path / "ok" / f"{run}_seed{seed}", [0, 600, 1200], '{"iter": 1250, "train_lo')
    assert study.main(["--suite=gpt2", f"--results={tmp_path / 'ok'}", "--summary"]) == 0
    assert "| encdec_none | 2 |" in capsys.readouterr().out
    write_log(tmp_path / "bad" / "baseline_seed0", [0, 600, 1200])
    with open(tmp_path / "bad" / "baseline_seed0" / "log.jsonl", "r+") as f:
        lines = f.readlines()
        f.seek(0)
        f.writelines([lines[0], "garbage\n", *lines[1:]])
    with pytest.raises(SystemExit) as exit:
        study.main(["--suite=gpt2", f"--results={tmp_path / 'bad'}", "--summary"])
    assert_one_line_error(str(exit.value.code), "baseline_seed0", "log.jsonl line 2 is not a JSON record")


@pytest.mark.parametrize("args, fragment", [
    (["--jobs=0"], "--jobs=0 is not allowed"), (["--max_iters=0"], "--max_iters=0 is not allowed"),
    (["--max_iters=-5"], "--max_iters=-5 is not allowed"), (["--summary"], "no runs in"),
    (["--suite=nope"], "invalid choice: 'nope'")])
def test_bad_arguments_are_one_line_errors_before_anything_runs(tmp_path, args, fragment):
    with pytest.raises(SystemExit) as exit:
        study.main([f"--results={tmp_path / 'empty'}", *args])
    assert_one_line_error(str(exit.value.code), fragment)


def test_a_second_study_on_the_same_results_folder_is_refused_saying_who_holds_it(tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from machinery import files; "
                               "files.hold_folder(sys.argv[1], 'x', 'study.py --suite=gpt2'); "
                               "print('held', flush=True); sys.stdin.read()", str(tmp_path)], cwd=ROOT, env=ENV,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    commands = no_training(monkeypatch)  # were it not refused: nothing downloaded, prepared or trained
    with pytest.raises(SystemExit) as exit:
        study.main(["--suite=gpt2", f"--results={tmp_path}"])
    assert_one_line_error(str(exit.value.code), f"is in use by pid {holder.pid} (study.py --suite=gpt2")
    holder.communicate("")
    assert commands == []


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP"])  # Ctrl-C; Colab, docker, Kubernetes; a hang-up
def test_ctrl_c_or_a_stop_signal_stops_the_study_and_its_runs_keeps_what_ran_and_says_how_to_go_on(tmp_path, stop):
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    child = f"import signal; open({str(fifo)!r}, 'w').write('started\\n'); signal.pause()"
    code = ("import subprocess, sys\nfrom lab import study\nfrom machinery.process import on_ctrl_c\n"
            "on_ctrl_c('the runs finished so far are kept')\n"  # as `python -m lab.study` starts
            "real = subprocess.Popen\n"
            f"study.subprocess.Popen = lambda cmd, **kw: real([sys.executable, '-c', {child!r}], **kw)\n"
            f"study.run_all('gpt2', {str(tmp_path)!r}, [('baseline', seed) for seed in range(5)], 10, 2)\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True,
                               preexec_fn=stops_at_their_defaults())
    started = 0
    while started < 2:  # train.py's stand-ins, two at a time, say they started: no waiting on a clock
        with open(fifo) as f:
            started += f.read().count("started")
    process.send_signal(getattr(signal, stop))  # to the study alone: it passes the stop on to its runs
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    assert_interrupted(subprocess.CompletedProcess([], 130, "", stderr), "2 cut short keep their last checkpoint",
                       "baseline seed 0", "baseline seed 1", "`python -m lab.study --suite=gpt2` goes on")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    assert os.read(reader, 100) == b""  # no third run was started
    os.close(reader)


def stopped_study(tmp_path, stand_in, ignored=(), stop="SIGTERM", lines=()):
    """A study of 5 runs, 2 at a time, whose train.py is stand_in (Python source: it calls started() once ready, and
    may append to the file `stopped`), started with the signals `ignored` ignored and sent `stop` once both stand-ins
    have started; lines: Python run in the study first. Returns (the study's exit status, its stderr, the stand-ins'
    pids). Bounded: the study and the stand-ins are killed after 30 s."""
    fifo, stopped = tmp_path / "started", tmp_path / "stopped"
    os.mkfifo(fifo)
    child = (f"import os, signal, sys\nsys.path.insert(0, {ROOT!r})\nstopped = {str(stopped)!r}\n"
             f"started = lambda: open({str(fifo)!r}, 'w').write(f'started {{os.getpid()}}\\n')\n{stand_in}")
    code = ("import subprocess, sys\nfrom lab import study\nfrom machinery.process import on_ctrl_c\n"
            "on_ctrl_c('the runs finished so far are kept')\n"  # as `python -m lab.study` starts
            + "".join(f"{line}\n" for line in lines) + "real = subprocess.Popen\n"
            f"study.subprocess.Popen = lambda cmd, **kw: real([sys.executable, '-c', {child!r}], **kw)\n"
            f"study.run_all('gpt2', {str(tmp_path)!r}, [('baseline', seed) for seed in range(5)], 10, 2)\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True,
                               preexec_fn=stops_at_their_defaults(ignored))
    pids = []
    try:
        while len(pids) < 2:  # the two stand-ins say they started: no waiting on a clock
            with open(fifo) as f:
                pids += [int(line.split()[1]) for line in f.read().splitlines()]
        process.send_signal(getattr(signal, stop))  # to the study alone: it passes the stop on to its runs
        _, stderr = process.communicate(timeout=30)
    finally:
        kill_all(process.pid, *pids)
        process.wait()
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    assert os.read(reader, 100) == b""  # no third run was started
    os.close(reader)
    return process.returncode, stderr, pids


def test_a_study_started_with_ctrl_c_ignored_passes_a_stop_on_to_its_runs_which_ignore_ctrl_c_too(tmp_path):
    """`nohup python -m lab.study ... &` in a script starts the study, and so its runs, with SIGINT ignored: SIGTERM
    stops the study and every run, at once; each run stops as train.py does (a KeyboardInterrupt) and keeps its
    checkpoint."""
    # started() inside the try: the stop may come as soon as the test has read both lines, before pause() is reached
    stand_in = ("from machinery import process\nprocess.on_ctrl_c('')\ntry:\n    started()\n    signal.pause()\n"
                "except KeyboardInterrupt:\n    open(stopped, 'a').write('stopped\\n')\n    sys.exit(1)\n")
    status, stderr, _ = stopped_study(tmp_path, stand_in, ignored=["SIGINT", "SIGHUP"])
    assert status == 130 and "Traceback" not in stderr, stderr
    assert_interrupted(subprocess.CompletedProcess([], 130, "", stderr), "2 cut short keep their last checkpoint")
    assert (tmp_path / "stopped").read_text() == "stopped\n" * 2


def test_a_run_that_does_not_stop_is_killed_after_a_while_and_the_study_says_so(tmp_path):
    stand_in = "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\n" \
               "started()\nsignal.pause()\n"
    status, stderr, pids = stopped_study(tmp_path, stand_in, lines=["study.STOP_WAIT = 1"])
    assert status == 130 and "Traceback" not in stderr, stderr
    assert_interrupted(subprocess.CompletedProcess([], 130, "", stderr), "2 cut short keep their last checkpoint",
                       "2 did not stop within 1 s and were killed")


def printed_commands(text):
    """The arguments of each `python -m lab.study ...` command in text, as a shell would split them."""
    return [shlex.split(command)[3:] for command in re.findall(r"`(python -m lab\.study [^`]*)`", text)]


def test_every_command_a_study_prints_goes_on_with_that_study(tmp_path, monkeypatch, capsys, ctrl_c_works):
    """After Ctrl-C, when every run is done, when none is: the command the study prints trains or tables the same
    runs, in the same --results folder, with the same steps, seeds and train.py settings."""
    options = [f"--results={tmp_path / 'my study'}", "--max_iters=3", "--seeds=2", "--jobs=1", "--n_layer=1"]
    trained, tabled = [], []

    def train(suite, results, run_, seed, max_iters, overrides=(), gpu=None):
        trained.append((suite, results, max_iters, list(overrides)))
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during the first run
        return "cut short; its last checkpoint is kept", None
    monkeypatch.setattr(study, "train", train)
    monkeypatch.setattr(study, "STOP", threading.Event())  # this test's stops, not the next test's
    monkeypatch.setattr(study, "summary", lambda suite, results, max_iters, seeds: tabled.append(
        (suite, results, max_iters, seeds)))
    monkeypatch.setattr(study, "dataset_meta", lambda settings: {"vocab_size": 256})  # prepared
    with pytest.raises(SystemExit):
        study.main(["--suite=byte", *options])
    [go_on] = printed_commands(capsys.readouterr().err)
    with pytest.raises(SystemExit):
        study.main(go_on)
    assert trained[1] == trained[0] == ("byte", str(tmp_path / "my study"), 3, ["--n_layer=1"])
    with pytest.raises(SystemExit) as e:  # no runs to table yet
        study.main(["--suite=byte", *options, "--summary"])
    [train_them] = printed_commands(str(e.value.code))
    with pytest.raises(SystemExit):
        study.main(train_them)
    assert trained[2] == trained[0]
    for run_ in study.SUITES["byte"]["runs"]:
        for seed in (0, 1):
            write_log(tmp_path / "my study" / f"{run_}_seed{seed}", [0, 3], suite="byte", overrides=["--n_layer=1"])
    assert study.main(["--suite=byte", *options]) == 0  # every run is done
    [table] = printed_commands(capsys.readouterr().out)
    assert study.main(table) == 0 and tabled == [("byte", str(tmp_path / "my study"), 3, [0, 1])]


@pytest.mark.parametrize("suite", ["gpt2", "byte", "gpt2_long", "gpt2_heldout", "gpt2_next"])
def test_a_copy_of_a_suites_committed_results_is_that_suites_for_every_other_suite(tmp_path, capsys, suite):
    """`cp -r lab/results/gpt2_study ../g2`: the copy holds the gpt2 study's runs, which no other suite tables or
    trains, with one line naming the suite they are of and how to table them; the suite itself tables its copy."""
    copy = tmp_path / "copy"
    shutil.copytree(os.path.join(ROOT, study.SUITES[suite]["results"]), copy)
    for other in sorted(set(study.SUITES) - {suite}):
        with pytest.raises(SystemExit) as e:
            study.main([f"--suite={other}", "--summary", f"--results={copy}"])
        assert_one_line_error(str(e.value.code), f"holds a run of the {suite} study", f"not of the {other} study",
                              f"`python -m lab.study --suite={suite} --summary --results={copy}`")
    assert study.main([f"--suite={suite}", "--summary", f"--results={copy}"]) == 0
    assert "| baseline |" in capsys.readouterr().out or suite == "gpt2_next"


def test_a_copied_results_folder_without_its_study_json_is_no_studys_and_a_run_folder_says_whose_it_is(
        tmp_path, monkeypatch):
    """`cp -r lab/results/gpt2_study COPY` that lost its study.json files: no study can show the logs are its runs, so
    neither the byte study (whose run names they share) nor the gpt2 study tables or trains them, with one line naming
    the folder; a run folder the study trained in says whose run it holds (study.json), with which settings after its
    config."""
    commands = no_training(monkeypatch)
    copy = tmp_path / "copy"
    shutil.copytree(os.path.join(ROOT, study.SUITES["gpt2"]["results"]), copy)
    for record in copy.glob("*/study.json"):
        record.unlink()
    for suite in ("byte", "gpt2"):
        for extra in ([], ["--summary"]):
            with pytest.raises(SystemExit) as e:
                study.main([f"--suite={suite}", f"--results={copy}", *extra])
            assert_one_line_error(str(e.value.code), f"{copy / 'baseline_seed0'} holds a log but no study.json",
                                  f"nor a checkpoint of the {suite} study's baseline seed 0",
                                  "only runs it can show are its own", "move the folder out of the way")
    assert commands == []
    mine = tmp_path / "mine"
    study.train("gpt2", str(mine), "baseline", 0, 1200, ["--n_layer=1"])  # fails at once: only study.json is written
    assert json.loads((mine / "baseline_seed0" / "study.json").read_text())["suite"] == "gpt2"
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={mine}"])
    assert_one_line_error(str(e.value.code), "holds a run of the gpt2 study (config/cpu_gpt2_baseline.py on "
                          "data/wikitext2_valid_gpt2c, where the byte study has config/cpu_baseline.py on")
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=gpt2", f"--results={mine}", "--n_layer=2"])
    assert_one_line_error(str(e.value.code), "was trained with --n_layer=1 after its config, not with --n_layer=2")
    assert len(commands) == 1  # the one train.py above


def fake_checkpoint(folder, suite, run_, run_seed, **changes):
    """folder/ckpt.pt holding the train_config of train.py's run of the suite's run_ and seed (its config file and
    the suite's settings over train.py's defaults), with changes: all that a study reads of a checkpoint."""
    import torch
    train_config = {**study.train_defaults(), **study.run_settings(suite, run_), "seed": run_seed,
                    "out_dir": str(folder), **changes}
    torch.save({"train_config": train_config}, folder / "ckpt.pt")


def test_a_train_py_of_other_settings_in_a_run_folder_is_not_the_suites_run_which_its_own_checkpoint_shows(
        tmp_path, monkeypatch, capsys):
    """RESULTS/baseline_seed0 where a train.py of other settings ran, its log past the suite's steps, with or without
    the study.json of an earlier start there: not counted as the suite's finished seed 0, trained on or tabled. The
    checkpoint of the run's own settings (on other hardware, to other steps) shows the run is the study's, study.json
    or not."""
    commands = no_training(monkeypatch)
    results = tmp_path / "results"
    for run_ in study.SUITES["byte"]["runs"]:
        for seed in study.SUITES["byte"]["seeds"]:
            write_log(results / f"{run_}_seed{seed}", [0, 100, 200], suite="byte")
    folder = results / "baseline_seed0"
    (folder / "study.json").unlink()
    fake_checkpoint(folder, "byte", "baseline", 0, n_layer=2, learning_rate=0.01)
    for record in (False, True):
        if record:
            write_record(folder, "byte")
        for extra in ([], ["--summary"]):
            with pytest.raises(SystemExit) as e:
                study.main(["--suite=byte", f"--results={results}", *extra])
            assert_one_line_error(str(e.value.code), f"{folder}/ckpt.pt was trained with learning_rate=0.01 (and 1 "
                                  "more setting(s)), where the byte study's baseline seed 0 has learning_rate=0.002",
                                  "not the study's run", "move the folder out of the way")
    (folder / "study.json").unlink()
    fake_checkpoint(folder, "byte", "baseline", 0, seed=1)  # another seed's
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={results}", "--summary"])
    assert_one_line_error(str(e.value.code), "trained with seed=1, where the byte study's baseline seed 0 has seed=0")
    fake_checkpoint(folder, "byte", "baseline", 0, max_iters=300, lr_decay_iters=300, eval_interval=75,
                    device="cuda", dtype="bfloat16", compile=True)
    assert study.main(["--suite=byte", f"--results={results}", "--summary"]) == 0
    assert study.main(["--suite=byte", f"--results={results}"]) == 0
    assert "every run of the byte study is done" in capsys.readouterr().out and commands == []


def test_help_says_which_runs_a_study_takes_as_its_own(capsys):
    with pytest.raises(SystemExit) as e:
        study.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    for fragment in ("only the run folders it can show are its own", "a study.json beside the log naming this suite",
                     "without study.json, a ckpt.pt whose train_config has the run's settings",
                     "all but out_dir, init_from, overwrite, max_iters, device, dtype and compile",
                     "Any other log or checkpoint in a run's folder, or a run of another study, stops it"):
        assert fragment in text, fragment


def test_a_study_checks_that_its_input_is_wikitext2_whatever_its_line_endings(tmp_path, monkeypatch):
    """--input stands for WikiText-2's valid.txt (here a stand-in with its sha256): a copy with Windows line endings is
    that text and is prepared; another text is refused with one line, before anything is prepared or trained."""
    commands = no_training(monkeypatch)
    monkeypatch.setattr(study, "dataset_meta", lambda settings: {})  # not prepared yet
    monkeypatch.setattr(study, "run_all", lambda *args, **kw: 0)
    text = word_articles(ASCII_WORDS, 4, 30)
    monkeypatch.setitem(pw.WIKITEXT2_FILES, "valid", ("valid.txt", "sha256", hashlib.sha256(text.encode()).hexdigest()))
    (tmp_path / "windows.txt").write_bytes(text.replace("\n", "\r\n").encode())
    (tmp_path / "other.txt").write_text(text.replace("river", "rivers"))
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={tmp_path / 'r'}", f"--input={tmp_path / 'other.txt'}"])
    assert_one_line_error(str(e.value.code), f"--input={tmp_path / 'other.txt'} is not WikiText-2's valid.txt",
                          "line endings aside", "the text of the byte study")
    assert commands == []
    assert study.main(["--suite=byte", f"--results={tmp_path / 'r'}", f"--input={tmp_path / 'windows.txt'}"]) == 0
    assert commands[0][1:3] == ["prepare_wikipedia.py", f"--input={tmp_path / 'windows.txt'}"]


def test_an_input_is_checked_where_the_data_is_prepared_already_and_said_to_be_unread(tmp_path, monkeypatch, capsys):
    """--input given where the suite's data is prepared: a file that is not WikiText-2's valid.txt is refused, the line
    saying that the data is prepared and --input not read then; the right file is not read either, which a note says;
    nothing is prepared."""
    commands = no_training(monkeypatch)
    monkeypatch.setattr(study, "dataset_meta", lambda settings: {"vocab_size": 256})  # prepared
    monkeypatch.setattr(study, "run_all", lambda *args, **kw: 0)
    text = word_articles(ASCII_WORDS, 4, 30)
    monkeypatch.setitem(pw.WIKITEXT2_FILES, "valid", ("valid.txt", "sha256", hashlib.sha256(text.encode()).hexdigest()))
    (tmp_path / "valid.txt").write_text(text)
    (tmp_path / "other.txt").write_text(text.replace("river", "rivers"))
    for wrong, fragment in (("other.txt", "is not WikiText-2's valid.txt"), ("missing.txt", "is not a file")):
        with pytest.raises(SystemExit) as e:
            study.main(["--suite=byte", f"--results={tmp_path / 'r'}", f"--input={tmp_path / wrong}"])
        assert_one_line_error(str(e.value.code), f"--input={tmp_path / wrong} {fragment}",
                              "or leave out --input: data/wikitext2_valid_byte is already prepared, and --input is "
                              "not read then")
    assert commands == [] and not (tmp_path / "r").exists()
    assert study.main(["--suite=byte", f"--results={tmp_path / 'r'}", f"--input={tmp_path / 'valid.txt'}"]) == 0
    assert ("note: data/wikitext2_valid_byte is already prepared, so --input is checked but not read"
            in capsys.readouterr().out)
    assert commands == []  # nothing prepared (and train.py stood in for by run_all)


def test_a_refused_study_start_leaves_no_results_folder_behind(tmp_path, monkeypatch):
    """An --input that is not the suite's text, a preparation that fails: one line, and no folder made for the
    results (nor the folders around it)."""
    monkeypatch.setattr(study, "dataset_meta", lambda settings: {})  # not prepared yet
    (tmp_path / "other.txt").write_text(word_articles(ASCII_WORDS, 4, 30))
    results = tmp_path / "new" / "results"
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={results}", f"--input={tmp_path / 'other.txt'}"])
    assert_one_line_error(str(e.value.code), "is not WikiText-2's valid.txt")
    monkeypatch.setattr(study.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1))
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={results}"])
    assert_one_line_error(str(e.value.code), "could not prepare data/wikitext2_valid_byte")
    assert os.listdir(tmp_path) == ["other.txt"]


@pytest.mark.parametrize("log, fragments", [
    ('{"iter": 0, "train_loss": 5.0}\n', ["baseline_seed0/log.jsonl record 1 has no number at val_loss (None)",
                                          "move its folder out of the way"]),
    ('{"iter": 0, "train_loss": 5.0, "val_loss": null}\n', ["record 1 has no number at val_loss (None)"]),
    ('{"iter": null, "train_loss": 5.0, "val_loss": 5.0}\n', ["record 1 has no number at iter (None)"]),
    (None, ["baseline_seed0/log.jsonl is a folder, not a log", "move it out of the way"])])
def test_summary_of_a_log_that_is_no_run_of_train_py_is_one_line_naming_it(tmp_path, log, fragments):
    write_log(tmp_path / "encdec_none_seed0", [0, 600, 1200])
    os.makedirs(tmp_path / "baseline_seed0" / ("log.jsonl" if log is None else ""))
    write_record(tmp_path / "baseline_seed0")  # the study's run: its log is what is wrong
    if log is not None:
        (tmp_path / "baseline_seed0" / "log.jsonl").write_text(log + "".join(
            json.dumps({"iter": i, "train_loss": 4.0, "val_loss": 5.0}) + "\n" for i in (600, 1200)))
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=gpt2", f"--results={tmp_path}", "--summary"])
    assert_one_line_error(str(e.value.code), *fragments)


def test_summary_of_a_partial_study_without_a_finished_baseline_says_what_is_missing(tmp_path, capsys):
    for seed in (0, 1):
        write_log(tmp_path / f"encdec_none_seed{seed}", [0, 600, 1200])
        write_log(tmp_path / f"baseline_seed{seed}", [0, 600], '{"iter": 1200, "train_lo')  # cut short, torn
    assert study.main(["--suite=gpt2", f"--results={tmp_path}", "--summary"]) == 0
    out = capsys.readouterr().out
    assert "| encdec_none | 2 |" in out and "| baseline |" not in out and "Interim, not final" in out
    assert "best val and final val - train: no finished baseline run yet" in out


@pytest.mark.parametrize("args, fragment", [
    (["--pick_lr=abc"], "--pick_lr=abc is not a list of learning rates"),
    (["--pick_lr=0.001,-1"], "--pick_lr=0.001,-1 is not a list of learning rates"),
    (["--pick_lr=0.001"], "encdec_none_seed0/log.jsonl has no evaluation from step 100 on"),
    (["--dry_run", "--eval_interval=0"], "eval_interval=0 is not allowed"),
    (["--dry_run", "--n_head=7"], "n_head=7 is not allowed: n_embed=64 must be divisible by it"),
    (["--dry_run"], "data/wikitext2_valid_gpt2c/meta.json is not a prepared dataset's meta.json")])
def test_dry_run_and_pick_lr_with_bad_values_or_a_corrupt_meta_json_are_one_line_errors(tmp_path, monkeypatch, args,
                                                                                        fragment):
    monkeypatch.setattr(study, "ROOT", str(tmp_path))  # no runs to pick from; a meta.json cut short; the configs
    shutil.copytree(os.path.join(ROOT, "config"), tmp_path / "config")
    if args == ["--dry_run"]:
        os.makedirs(tmp_path / "data" / "wikitext2_valid_gpt2c")
        (tmp_path / "data" / "wikitext2_valid_gpt2c" / "meta.json").write_text('{"vocab_size": 1')
    (tmp_path / "train.py").write_text(open(os.path.join(ROOT, "train.py")).read())
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=gpt2", *args])
    assert_one_line_error(str(e.value.code), fragment)


def test_dry_run_measures_a_cpu_runs_speed_also_as_python_m_lab_study():
    settings = {**study.run_settings("byte", "baseline", ["--n_layer=1", "--n_embed=32", "--context_size=16"]),
                "batch_size": 2}
    assert study.measured_tokens_per_s(settings, steps=1) > 0


def test_a_train_py_failure_while_picking_the_learning_rate_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "ROOT", str(tmp_path))
    write_log(tmp_path / "lab" / "results" / "gpt2_study" / "encdec_none_seed0", range(0, 1250, 50), suite=None)
    monkeypatch.setattr(study, "run_process", lambda cmd, env: (
        1, "eval 0: ...\nerror: could not write out/log.jsonl: the disk is full\n"))
    with pytest.raises(SystemExit) as e:
        study.main(["--pick_lr=0.001"])
    assert_one_line_error(str(e.value.code), "the baseline at learning_rate=0.001 failed: could not write "
                          "out/log.jsonl: the disk is full")


@pytest.mark.parametrize("args, fragments", [
    (["--n_layr=1"], ["unknown config key 'n_layr'", "did you mean 'n_layer'?"]),
    (["--dry_run", "--n_layr=1"], ["unknown config key 'n_layr'", "did you mean 'n_layer'?"]),
    (["--summary", "--contxt_size=64"], ["unknown config key 'contxt_size'", "did you mean 'context_size'?"]),
    (["--n_layer=two"], ["n_layer='two'", "has the wrong type: n_layer takes an integer, not a string"]),
    (["--n_head=7"], ["n_head=7 is not allowed: n_embed=96 must be divisible by it"]),
    (["--seed=3"], ["--seed: the study sets it for each run", "--seeds=N"]),
    (["--out_dir=x", "--overwrite=True"], ["--out_dir, --overwrite: the study sets it for each run"])])
def test_a_setting_train_py_would_refuse_stops_the_study_before_it_starts(tmp_path, monkeypatch, args, fragments):
    commands = no_training(monkeypatch)
    with pytest.raises(SystemExit) as e:
        study.main(["--suite=byte", f"--results={tmp_path}", *args])
    assert_one_line_error(str(e.value.code), *fragments)
    assert commands == [] and not os.listdir(tmp_path)


def test_the_study_knows_the_settings_train_py_takes_without_running_it():
    listed = run("train.py", "--help", cwd=ROOT).stdout
    assert [line.split("=")[0].strip()[2:] for line in listed.splitlines() if line.startswith("  --")] == \
        list(study.train_defaults())
    assert study.train_defaults()["learning_rate"] == 9e-4 and study.train_defaults()["n_layer"] is None
