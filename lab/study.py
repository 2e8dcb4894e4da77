"""
The comparisons of the write-up "Auto-regressive Encoder-Decoder Transformer", re-run at CPU scale with several
random seeds, through train.py: two suites, each resumable (run the same command again after an interruption).

    python -m lab.study --suite=gpt2     # GPT-2 tokens, many passes, overfitting: the write-up's regime
    python -m lab.study --suite=gpt2_long  # three of its runs to 3,000 steps: where val loss turns
    python -m lab.study --suite=byte     # byte tokens, under one pass: early learning speed
    python -m lab.study --suite=gpt2 --dry_run   # its runs, and how long they take here: a few steps of each, timed
    python -m lab.study --suite=paper --dry_run  # the write-up's own table at its scale, on CUDA GPUs: plan and cost
    python -m lab.study --suite=paper    # 8 configurations x 3 seeds, one run per visible GPU (docs/reproduce.md)
    python -m lab.study --suite=gpt2 --summary           # the table of results so far, with paired differences
    python -m lab.study --suite=gpt2 --results=my_rerun  # train everything again into another folder

Logs go to lab/results/<folder>/<run>_seed<N>/log.jsonl (read by notebooks/02_loss_curves.ipynb); a run whose log
reaches max_iters is done, one with a checkpoint resumes from it. Checkpoints stay next to the logs (git ignores
them), for evaluate.py and sample.py, and so that a run can be extended exactly by raising max_iters.
A study takes as its own, to table, to count as done or to resume, only the run folders it can show are its own:
  - a study.json beside the log naming this suite, the run's config file and dataset and, when training, the same
    train.py settings after them (the study writes it before training there; copy the whole folder to keep it), and a
    ckpt.pt there, if any, trained with those settings;
  - or, without study.json, a ckpt.pt whose train_config has the run's settings: those of its config file, of the
    suite and yours (--key=value; none for --summary), and its seed; all but out_dir, init_from, overwrite, max_iters,
    device, dtype and compile, and the lr_decay_iters and eval_interval that the byte suite sets from max_iters.
Any other log or checkpoint in a run's folder, or a run of another study, stops it with one line naming the folder.
Runs with the same seed see the same batches, so each comparison is made seed by seed (paired).
Any other --key=value goes to every train.py run, after the suite's settings: e.g. --device=cpu --n_layer=1.
"""
import ast
import functools
import hashlib
import json
import math
import os
import pickle
import queue
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # also as `python lab/study.py`
from configurator import configure, read_config, split_args, unknown_argument
from machinery.files import hold_folder, make_folder, write_atomic
from machinery.process import fail
from configurator import add_flag, argument_parser
from machinery.process import on_ctrl_c
from data import prepare_command
from text import read_text
from prepare_wikipedia import WIKITEXT2_FILES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: train.py, config/, data/
SUITES = {
    # config/cpu_<run>.py, 200 steps (the configs say 300), seeds 0-2
    "byte": dict(results="lab/results/cpu_study", config="cpu_", seeds=[0, 1, 2], max_iters=200,
                 dataset="wikitext2_valid_byte", prepare=["--tokenizer=byte"], best="encdec_mse_pos_sub",
                 figures=["final_val"],
                 runs=["baseline", "smaller_baseline", "dropout_baseline", "encdec_none", "encdec_mse", "encdec_cosine",
                       "encdec_pos_sub", "encdec_mse_pos_sub", "parallel", "baseline_pos_sub"]),
    # config/cpu_gpt2_<run>.py as written; the first five are the core, run first for seeds 0-2 and then seeds 3 and 4
    # for every core run not told from the baseline by then (see close_runs); then the rest alike
    "gpt2": dict(results="lab/results/gpt2_study", config="cpu_gpt2_", seeds=[0, 1, 2], extra_seeds=[3, 4],
                 max_iters=None, dataset="wikitext2_valid_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"],
                 core=5, best="encdec_mse_pos_sub_coeff1", figures=["best_val", "late_val", "final_val"],
                 train_levels=[4.6, 4.4, 4.2],
                 runs=["baseline", "encdec_none", "encdec_mse_pos_sub", "encdec_mse_pos_sub_coeff1",
                       "encdec_mse_pos_sub_fixed_ln", "smaller_baseline", "dropout_baseline", "encdec_pos_sub",
                       "encdec_mse", "encdec_dropout", "baseline_pos_sub", "parallel", "encdec_cosine"]),
    # the same configs run 2.5 times longer (3,000 steps, ~25 passes), to see where val loss turns and whether the
    # encoder-decoder holds off overfitting; same batches and schedule as the gpt2 suite's runs, equal to float
    # rounding; seeds 3 and 4 by the same rule as the gpt2 suite. A run starts from the gpt2 suite's finished
    # checkpoint of the same config and seed where there is one (extends): the same run, 1,200 steps cheaper
    "gpt2_long": dict(results="lab/results/gpt2_long", config="cpu_gpt2_", seeds=[0, 1, 2], extra_seeds=[3, 4],
                      max_iters=3000, extends="gpt2",
                      dataset="wikitext2_valid_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"], core=3,
                      best="encdec_mse_pos_sub_coeff1", figures=["best_val", "late_val", "final_val"],
                      train_levels=[4.2, 3.9, 3.6],
                      runs=["baseline", "encdec_none", "encdec_mse_pos_sub_coeff1"]),
    # The gpt2_long runs on a held-out set 16x larger: trained on all 60 articles of WikiText-2's validation split,
    # evaluated on its test split (~296k tokens, also without the ids that never occur in training), every 100 steps,
    # 5 seeds; with the control for "fits more slowly", the baseline at a learning rate lowered so that its train
    # loss tracks the bare encoder-decoder's (config/cpu_gpt2_baseline_slow.py says how it was picked)
    "gpt2_heldout": dict(results="lab/results/gpt2_heldout", config="cpu_gpt2_", seeds=[0, 1, 2, 3, 4], max_iters=3000,
                         dataset="wikitext2_valid-test_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"],
                         download=["--wikitext2=valid", "--wikitext2_val=test"],
                         args=["--dataset=wikitext2_valid-test_gpt2c", "--vocab_size=18013", "--eval_interval=100"],
                         best="encdec_mse_pos_sub_coeff1", figures=["best_val", "late_val", "final_val"],
                         train_levels=[4.2, 3.9, 3.6],
                         runs=["baseline", "encdec_none", "encdec_mse_pos_sub_coeff1", "baseline_slow"]),
    # The write-up's next steps on gpt2_heldout's 60 articles, against that suite's baseline and bare encoder-decoder
    # (read from there, not trained again): its 8 layers split 2 + 6 and 6 + 2 (4 + 4 is encdec_none), and rotary
    # positions with and without pos sub; its claims (NEXT_STEPS) are a family of their own. First, one seed each of
    # the pictures' runs: checkpoints for notebooks/02_loss_curves.ipynb's look at the embeddings (section 3)
    "gpt2_next": dict(results="lab/results/gpt2_next", config="cpu_gpt2_", seeds=[0, 1, 2, 3, 4], max_iters=3000,
                      dataset="wikitext2_valid-test_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"],
                      download=["--wikitext2=valid", "--wikitext2_val=test"], reference="gpt2_heldout",
                      args=["--dataset=wikitext2_valid-test_gpt2c", "--vocab_size=18013", "--eval_interval=100"],
                      figures=["best_val", "late_val"], pictures=["baseline_pos_sub", "encdec_pos_sub", "encdec_mse"],
                      runs=["encdec_none_2_6", "encdec_none_6_2", "baseline_rotary", "encdec_none_rotary",
                            "baseline_rotary_pos_sub", "encdec_rotary_pos_sub"]),
    # The write-up's own table at its own scale: config/paper_<run>.py as written (9,000 steps of 160,000 tokens), on
    # WikiText-103 articles sized to its token files (prepare_wikipedia.py --wikitext103), on CUDA with bf16 autocast
    # and torch.compile, one run per visible GPU; the primary comparisons first (docs/reproduce.md pre-registers them)
    "paper": dict(results="lab/results/paper_study", config="paper_", seeds=[0, 1, 2], max_iters=None,
                  dataset="wikitext103", prepare=[], download=["--wikitext103"], core=3, gpu=True,
                  args=["--dataset=wikitext103", "--device=cuda", "--dtype=bfloat16", "--compile=True"],
                  best="encdec_mse_pos_sub", figures=["late_val"],  # the pre-registered figure; the others: table
                  train_levels=[3.3, 3.1, 3.0],
                  runs=["baseline", "encdec_none", "encdec_mse_pos_sub", "smaller_baseline", "dropout_baseline",
                        "encdec_mse", "encdec_cosine", "encdec_pos_sub"]),
}
# The write-up's reported (train loss, val loss) of each run of its table: one run each, 9,000 steps on one A100
WRITE_UP_RUNS = {"baseline": (2.937, 3.424), "smaller_baseline": (2.958, 3.416), "dropout_baseline": (3.174, 3.406),
                 "encdec_none": (3.043, 3.413), "encdec_mse": (2.998, 3.385), "encdec_cosine": (2.993, 3.387),
                 "encdec_pos_sub": (2.979, 3.381), "encdec_mse_pos_sub": (2.982, 3.378)}


def config_file(suite, run):
    """The run's config, relative to the repository: lab/config/<prefix><run>.py for a study-only one, else the one in
    config/ that users run too."""
    name = f"{SUITES[suite]['config']}{run}.py"
    return f"lab/config/{name}" if os.path.exists(os.path.join(ROOT, "lab", "config", name)) else f"config/{name}"


def config_value(suite, run, key):
    """A setting of the run's config file, read as train.py reads it."""
    return read_config(os.path.join(ROOT, config_file(suite, run)))[key]


def suite_iters(suite, run):
    """The steps of one run of a suite: the suite's max_iters, or the run's config's where the suite sets none."""
    return SUITES[suite]["max_iters"] or config_value(suite, run, "max_iters")


def run_dir(results, run, seed):
    return os.path.join(results, f"{run}_seed{seed}")


def read_log(path):
    """The records of a run's log.jsonl (one JSON object per evaluation) and whether its last line was torn, cut short
    by a crash or a full disk, and left out; a broken line before the last stops with one line naming it."""
    if not os.path.exists(path):
        return [], False
    if os.path.isdir(path):
        fail(f"{path} is a folder, not a log; move it out of the way, then run again")
    with open(path, "rb") as f:
        lines = [line for line in f.read().split(b"\n") if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
            record["iter"]  # every record has one
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:
                fail(f"{path} line {i + 1} is not a JSON record; delete that line, then run again")
            return records, True
        records.append(record)
    return records, False


def run_log(path, keys=("iter", "train_loss", "val_loss")):
    """The records of a run's log.jsonl (read_log: a torn last line left out), each checked to hold a number
    at each of keys, which the study reads; one line naming the log and the fix where one does not."""
    try:
        records = read_log(path)[0]
    except OSError as e:
        fail(f"cannot read {os.path.relpath(path)} ({e.strerror}); make it readable, or move its folder out of the way")
    for i, record in enumerate(records, 1):
        bad = {k: record.get(k) for k in keys if type(record.get(k)) not in (int, float)}
        if bad:
            what = ", ".join(f"{k} ({v!r})" for k, v in bad.items())
            fail(f"{os.path.relpath(path)} record {i} has no number at {what}: not a log of train.py's; move its "
                 f"folder out of the way (or delete it to train the run again)")
    return records


def run_record(suite, run, overrides=()):
    """What makes a run folder a suite's: the suite, the run's config file and dataset, and the train.py settings given
    after them. The study writes it into the folder as study.json before training there."""
    return {"suite": suite, "config": config_file(suite, run),
            "dataset": run_settings(suite, run, overrides)["dataset"], "overrides": check_overrides(overrides)}


def check_own_runs(suite, results, runs, seeds, overrides=None):
    """Stop with one line at a run folder in results that the study cannot show is its own. The folder of one of its
    runs (<run>_seed<N>) that holds anything (a log, a checkpoint) is its own only where
      - its study.json (the study writes it before training there, and a copy of the folder keeps it) names this
        suite, the run's config file and dataset (the dataset unless its overrides set it), and, overrides given
        (before training), the same train.py settings after them; and its ckpt.pt, if any, was trained with them;
      - or, without study.json, its ckpt.pt was trained with the run's settings (checkpoint_differences).
    A log with neither (a copy that lost its study.json, a train.py of other settings) is no run of the study's. Any
    other folder whose study.json names another suite stops it too. overrides None: for a table (--summary), which
    the line names; the run's settings are then those its study.json names."""
    def not_ours(folder, theirs, what=""):
        fix = (f"its table is `{study_command(theirs, ['--summary', results_option(results)])}`" if overrides is None
               else f"use the {suite} study's own --results (default {SUITES[suite]['results']}) or a new folder")
        fail(f"{os.path.relpath(folder)} holds a run of the {theirs} study{what}, not of the {suite} study; {fix}")
    ours = {os.path.basename(run_dir(results, run, seed)): (run, seed) for run in runs for seed in seeds}
    others = [name for name in (sorted(os.listdir(results)) if os.path.isdir(results) else []) if name not in ours
              and os.path.exists(os.path.join(results, name, "study.json"))]
    for name in [*ours, *others]:  # the runs of another suite, named as none of this one's, too
        folder, (run, seed) = os.path.join(results, name), ours.get(name, (None, None))
        record_path = os.path.join(folder, "study.json")
        if not os.path.exists(record_path):
            if run is not None and any(os.path.exists(os.path.join(folder, f)) for f in ("log.jsonl", "ckpt.pt")):
                checkpoint_shows(suite, folder, run, seed, {} if overrides is None else check_overrides(overrides),
                                 record=False)
            continue
        try:
            with open(record_path, encoding="utf-8") as f:
                record = json.load(f)
            if not isinstance(record.get("overrides"), dict):
                raise TypeError
        except (OSError, ValueError, AttributeError, TypeError):
            fail(f"{record_path} is not a study's record of the run; move {os.path.relpath(folder)} out of the "
                 f"way (or delete it to train the run again)")
        if run is None:
            if record["suite"] != suite:
                not_ours(folder, record["suite"])
            continue
        wanted = run_record(suite, run, overrides or [])
        theirs = {key: record.get(key) for key in ("suite", "config", "dataset") if key not in record["overrides"]}
        if theirs != {key: wanted[key] for key in theirs}:
            not_ours(folder, record["suite"], f" ({record.get('config')} on data/{record.get('dataset')}, where the "
                                              f"{suite} study has {wanted['config']} on data/{wanted['dataset']})")
        if overrides is not None and record.get("overrides") != wanted["overrides"]:
            given = lambda settings: " ".join(f"--{k}={v}" for k, v in settings.items()) or "no settings"
            fail(f"{os.path.relpath(folder)} was trained with {given(record.get('overrides') or {})} after its "
                 f"config, not with {given(wanted['overrides'])}; give the same to go on, or use another --results")
        checkpoint_shows(suite, folder, run, seed, record["overrides"], record=True)


# the train.py settings in which a run's checkpoint may differ from the run's own: where it was written, how far it
# goes (a run is extended by raising max_iters), and the hardware it ran on (a resume may change it)
UNCOMPARED = ("out_dir", "init_from", "overwrite", "max_iters", "device", "dtype", "compile")


def schedule_args(suite, max_iters):
    """The train.py settings a suite gives each run after the user's, set from its max_iters: the byte suite, shorter
    than its configs, keeps their schedule's shape (the cosine reaches min_lr at the last step), 4 evaluations."""
    return [f"--lr_decay_iters={max_iters}", f"--eval_interval={max(1, max_iters // 4)}"] if suite == "byte" else []


def checkpoint_settings(folder):
    """The train.py settings saved in folder/ckpt.pt (its train_config); {} where there is no checkpoint, None where
    it cannot be read. Memory-mapped: its weights are not read."""
    path = os.path.join(folder, "ckpt.pt")
    if not os.path.exists(path):
        return {}
    import torch
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["train_config"]
    except (OSError, RuntimeError, EOFError, ValueError, TypeError, KeyError, pickle.UnpicklingError):  # not train.py's
        return None
    return saved if isinstance(saved, dict) and saved else None


def checkpoint_differences(suite, run, seed, saved, given):
    """[(key, the checkpoint's value, the run's)] of each setting in which a checkpoint's train_config (saved) is not
    the suite's run of this seed: every setting its config file, the suite's train.py arguments and given (the user's
    settings, {key: value}) set, and the seed; not the UNCOMPARED ones, nor those the suite sets from max_iters."""
    wanted = {**run_settings(suite, run), **given, "seed": seed}
    skip = set(UNCOMPARED) | set(parse_overrides(schedule_args(suite, 1)))
    return [(key, saved[key], value) for key, value in wanted.items()
            if key in saved and key not in skip and saved[key] != value]


def checkpoint_shows(suite, folder, run, seed, given, record):
    """Stop with one line unless the checkpoint in folder, if any, is of the suite's run (run, seed) with the user's
    settings given; record: whether the folder has a study.json, without which a checkpoint must show it."""
    saved, where = checkpoint_settings(folder), os.path.relpath(folder)
    where = folder if where.startswith(os.pardir) else where  # as given, outside the working folder
    move = "move the folder out of the way, or use another --results"
    if not saved and not record:
        what = "a checkpoint that cannot be read" if saved is None else "a log"
        fail(f"{where} holds {what} but no study.json, the record of whose run it is, nor a checkpoint of the {suite} "
             f"study's {run} seed {seed}: the study takes as its own only runs it can show are its own; {move} (a "
             f"copied run keeps its study.json)")
    differences = checkpoint_differences(suite, run, seed, saved, given) if saved else []
    if differences:
        key, theirs, ours = differences[0]
        more = f" (and {len(differences) - 1} more setting(s))" if len(differences) > 1 else ""
        fail(f"{where}/ckpt.pt was trained with {key}={theirs!r}{more}, where the {suite} study's {run} seed {seed} "
             f"has {key}={ours!r}: it is not the study's run (a train.py of other settings ran there); {move}")


def results_option(results):
    """--results=FOLDER naming the folder results as the study reads it: from the repository, or absolute outside."""
    inside = os.path.relpath(results, ROOT)
    return f"--results={results if inside.startswith(os.pardir) else inside}"


def start_from_shorter_run(suite, run, seed, out_dir):
    """Copy the finished run of the suite this one extends (same config and seed) into out_dir, to be resumed from:
    batches and learning rate depend only on (seed, step), so it is the same run without the cost of its first steps.
    Returns the step it starts at, or None where there is no such run."""
    shorter = SUITES[suite].get("extends")
    if not shorter:
        return None
    src = run_dir(os.path.join(ROOT, SUITES[shorter]["results"]), run, seed)
    log = run_log(os.path.join(src, "log.jsonl"))
    if not (log and log[-1]["iter"] >= suite_iters(shorter, run) and os.path.exists(os.path.join(src, "ckpt.pt"))):
        return None
    os.makedirs(out_dir, exist_ok=True)
    for name in ("log.jsonl", "ckpt.pt"):  # the checkpoint last: a copy cut short leaves none, and is made again
        tmp = os.path.join(out_dir, name) + ".partial"  # a copy cut short is made again
        shutil.copyfile(os.path.join(src, name), tmp)
        os.replace(tmp, os.path.join(out_dir, name))
    return log[-1]["iter"]


def train(suite, results, run, seed, max_iters, overrides=(), gpu=None):
    """One run of a suite through train.py (resumed where it has a checkpoint); overrides: --key=value after the
    suite's; gpu: the one CUDA device it sees. Returns (status, its last log record or None if it failed)."""
    out_dir = run_dir(results, run, seed)
    log = run_log(os.path.join(out_dir, "log.jsonl"))
    if log and log[-1]["iter"] >= max_iters:
        return "done before", log[-1]
    ckpt = os.path.join(out_dir, "ckpt.pt")
    started_at = None if os.path.exists(ckpt) else start_from_shorter_run(suite, run, seed, out_dir)
    resume = os.path.exists(ckpt)
    cmd = [sys.executable, "train.py", config_file(suite, run), f"--seed={seed}",
           f"--out_dir={os.path.relpath(out_dir, ROOT)}", f"--max_iters={max_iters}"]
    cmd += SUITES[suite].get("args", []) + list(overrides)
    cmd += schedule_args(suite, max_iters)
    cmd += ["--init_from=resume"] if resume else ["--overwrite=True"] if log else []  # a cut run without checkpoint
    if STOP.is_set():  # Ctrl-C: no new runs
        return "not started", None
    os.makedirs(out_dir, exist_ok=True)  # the folder says whose run it holds (check_own_runs)
    write_atomic(os.path.join(out_dir, "study.json"), json.dumps(run_record(suite, run, overrides)).encode())
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    t0 = time.time()
    returncode, output = run_process(cmd, env)
    if returncode:
        if STOP.is_set():
            return "cut short; its last checkpoint is kept", None
        return f"FAILED ({' '.join(cmd[1:])}):\n{output[-2000:]}", None
    note = (f" (from the {SUITES[suite]['extends']} suite's step {started_at})" if started_at is not None
            else " (resumed)" if resume else "")
    return f"{time.time() - t0:.0f}s{note}", read_log(os.path.join(out_dir, "log.jsonl"))[0][-1]


def pick_lr(rates, n_jobs, seed=0, reference="encdec_none"):
    """The control's learning rate, picked on seed 0 of the gpt2 suite (same text, schedule and evaluation): baselines
    at each rate (min_lr a tenth of it), and the rate whose train-loss curve is nearest the bare encoder-decoder's
    (root mean square difference over the evaluations from step 100)."""
    results = os.path.join(ROOT, "lab", "results", "gpt2_lr_pick")
    ref_path = os.path.join(ROOT, run_dir(SUITES["gpt2"]["results"], reference, seed), "log.jsonl")
    ref = {r["iter"]: r["train_loss"] for r in run_log(ref_path, ("iter", "train_loss"))}
    if max(ref, default=0) < 100:
        fail(f"{os.path.relpath(ref_path)} has no evaluation from step 100 on to compare with; train that run first: "
             f"python -m lab.study --suite=gpt2")

    def run(rate):
        out_dir = run_dir(results, f"baseline_lr{rate:g}", seed)
        log = run_log(os.path.join(out_dir, "log.jsonl"), ("iter", "train_loss"))
        if not log or log[-1]["iter"] < max(ref):
            resume = ["--init_from=resume"] if os.path.exists(os.path.join(out_dir, "ckpt.pt")) else []
            if STOP.is_set():  # Ctrl-C: no new runs
                return None
            returncode, output = run_process(
                [sys.executable, "train.py", "config/cpu_gpt2_baseline.py", f"--seed={seed}", f"--learning_rate={rate}",
                 f"--min_lr={rate / 10}", f"--max_iters={max(ref)}", f"--out_dir={os.path.relpath(out_dir, ROOT)}",
                 *resume], dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"))
            if returncode and not STOP.is_set():
                fail(f"the baseline at learning_rate={rate:g} failed: "
                     + ((output.strip().splitlines() or ["(no message)"])[-1]).removeprefix("error: "))
            if returncode:
                return None
            log = run_log(os.path.join(out_dir, "log.jsonl"), ("iter", "train_loss"))
        d = [r["train_loss"] - ref[r["iter"]] for r in log if r["iter"] >= 100 and r["iter"] in ref]
        return math.sqrt(sum(x * x for x in d) / len(d)), sum(d) / len(d)

    pool = ThreadPoolExecutor(n_jobs)
    try:
        distances = dict(zip(rates, pool.map(run, rates)))
    except KeyboardInterrupt:
        STOP.set()
        killed = stop_runs()
        pool.shutdown(wait=True, cancel_futures=True)
        print(f"interrupted: the runs cut short keep their last checkpoint in {os.path.relpath(results)}/{killed}; "
              f"the same command goes on from there", file=sys.stderr, flush=True)
        raise SystemExit(130)
    pool.shutdown()
    for rate, (rms, mean) in distances.items():
        print(f"learning_rate={rate:g}: train loss - {reference}'s: rms {rms:.4f}, mean {mean:+.4f}")
    best = min(rates, key=lambda rate: distances[rate][0])
    print(f"nearest: learning_rate={best:g}")
    return best


STOP, RUNNING = threading.Event(), set()  # Ctrl-C: start no more runs; the train.py processes running now
STOP_WAIT = 30  # seconds a run has, once stopped, to say where its checkpoint is and end, before it is killed


def run_process(cmd, env):
    """(exit status, stdout and stderr) of cmd (a train.py run), run from the repository, where a stop reaches it."""
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    RUNNING.add(process)
    try:
        output = process.communicate()[0]
    finally:
        RUNNING.discard(process)
    return process.returncode, output


def stop_runs():
    """Pass a stop (Ctrl-C, SIGTERM, SIGHUP) on to the runs still going, then kill those still going after STOP_WAIT
    seconds: SIGTERM, not SIGINT, which a study started in the background, and so its runs, ignore (if the study was
    started ignoring SIGTERM too, SIGINT). Returns what to add to the line that says so: the runs killed, if any."""
    processes = list(RUNNING)
    if os.name == "posix":  # Windows has no signal to send; its console's Ctrl-C reaches every process itself
        stop = signal.SIGINT if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN else signal.SIGTERM
        for process in processes:
            process.send_signal(stop)
    deadline, killed = time.monotonic() + STOP_WAIT, 0
    for process in processes:
        try:
            process.wait(timeout=max(0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            killed += 1
    return f"; {killed} did not stop within {STOP_WAIT} s and were killed" if killed else ""


def run_all(suite, results, jobs, max_iters, n_jobs, overrides=(), gpus=(), go_on=None):
    """Train the (run, seed) jobs, n_jobs at a time, or one per GPU of gpus, each seeing only its own. Ctrl-C stops
    them all, keeping every finished run and the last checkpoint of every run cut short, and says how to go on (go_on:
    the command that continues the study)."""
    start, failed = time.time(), 0
    free = queue.Queue()
    for gpu in gpus:
        free.put(gpu)

    def on_a_free_gpu(run, seed):
        gpu = free.get()
        try:
            return train(suite, results, run, seed, max_iters or suite_iters(suite, run), overrides, gpu)
        finally:
            free.put(gpu)
    pool, futures = ThreadPoolExecutor(len(gpus) or n_jobs), []
    try:  # a stop while the runs are being handed out too
        for run, seed in jobs:
            futures.append(pool.submit(on_a_free_gpu, run, seed) if gpus else
                           pool.submit(train, suite, results, run, seed, max_iters or suite_iters(suite, run),
                                       overrides))
        for i, ((run, seed), future) in enumerate(zip(jobs, futures), 1):
            status, last = future.result()
            failed += last is None
            losses = f"train {last['train_loss']:.4f}, val {last['val_loss']:.4f}; " if last else ""
            minutes = (time.time() - start) / 60
            print(f"[{i:2d}/{len(jobs)}] {run} seed {seed}: {losses}{status}; {minutes:.1f} min so far", flush=True)
    except KeyboardInterrupt:
        STOP.set()
        killed = stop_runs()  # each saves nothing more and says where its checkpoint is
        pool.shutdown(wait=True, cancel_futures=True)
        ended = [(job, f.result()) for job, f in zip(jobs, futures) if f.done() and not f.cancelled()]
        cut = [f"{run} seed {seed}" for (run, seed), (status, _) in ended if status.startswith("cut short")]
        done = sum(last is not None for _, (_, last) in ended)
        print(f"interrupted: {done} run(s) of this batch finished and are kept in {os.path.relpath(results)}/; "
              f"{len(cut)} cut short keep their last checkpoint ({', '.join(cut) or 'none'}){killed}; "
              f"`{go_on or study_command(suite)}` goes on from there", file=sys.stderr, flush=True)
        raise SystemExit(130)
    pool.shutdown()
    return failed


# -----------------------------------------------------------------------------
# the plan and its cost, before a suite starts

# Where no GPU is here to time on, the cost comes from training tokens/s measured on one NVIDIA H200 (torch 2.11,
# micro-batch 50 x 200 tokens, bf16 autocast, fused AdamW, one run each): the baseline compiled; the encoder-decoder
# eager, as its compile failed there (eager baseline: 250,336). `python -m lab.gpu_check` measures them anew.
MEASURED_TOKENS_PER_S = {"baseline": (304_198, "compiled"), "encdec": (142_677, "eager")}  # the paper suite's shapes


def parse_overrides(args):
    """{key: value} of --key=value arguments, read as train.py reads them (a Python literal, else a string)."""
    out = {}
    for key, text in split_args(args):  # train.py's grammar: --key=value, --key value, a bare --flag
        if not key:
            fail(f"'{text or '--'}' is neither a study.py option nor a train.py setting --key=value; "
                 f"see python -m lab.study -h")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = text
    return out


@functools.lru_cache(maxsize=None)
def train_defaults():
    """train.py's settings and their defaults as its configure() call gets them, read from its source without running
    it: the literal assignments above its `defaults = ...` line, then every ModelConfig field (None: the variant's)."""
    from model import ModelConfig
    with open(os.path.join(ROOT, "train.py"), encoding="utf-8") as f:
        statements = ast.parse(f.read()).body
    defaults = {}
    for node in statements:
        names = [target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
        if names == ["defaults"]:
            break
        try:
            if len(names) == 1:
                defaults[names[0]] = ast.literal_eval(node.value)
        except ValueError:  # not a literal: not a setting
            pass
    return {**{k: v for k, v in defaults.items() if not k.startswith("_")}, **dict.fromkeys(ModelConfig.flags())}


PER_RUN = ("seed", "out_dir", "init_from", "overwrite")  # the study's own train.py settings, different for each run


def check_overrides(overrides):
    """{key: value} of train.py settings given to a study as --key=value, read and checked as train.py reads them
    (configurator.configure: a known key, else the did-you-mean, and a value of its type), so that a mistake stops the
    study before it starts, not each of its runs; the settings the study gives each run itself are refused."""
    from model import ModelConfig
    parse_overrides(overrides)  # one line for anything that is not --key=value
    settings = {}
    configure(settings, train_defaults(), list(overrides), ModelConfig)
    taken = [f"--{key}" for key in PER_RUN if key in settings]
    if taken:
        fail(f"{', '.join(taken)}: the study sets it for each run; leave it out (--seeds=N and --results=FOLDER choose "
             f"the seeds and where the runs go)")
    return settings


def run_settings(suite, run, overrides=()):
    """The settings of one run of a suite: its config file, then the suite's train.py arguments, then overrides."""
    settings = read_config(os.path.join(ROOT, config_file(suite, run)))
    settings.update(check_overrides(SUITES[suite].get("args", []) + list(overrides)))
    return settings


def dataset_meta(settings):
    """meta.json of a run's prepared dataset, or {} where it is not prepared yet; one line where it is not one that
    prepare_wikipedia.py writes."""
    meta_path = os.path.join("data", settings["dataset"], "meta.json")
    if not os.path.exists(os.path.join(ROOT, meta_path)):
        return {}
    try:
        with open(os.path.join(ROOT, meta_path), encoding="utf-8") as f:
            meta = json.load(f)
        counts = [meta["vocab_size"], meta.get("train_tokens", 0), meta.get("val_tokens", 0)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        counts = None
    if not counts or not all(type(n) is int and n >= 0 for n in counts):
        fail(f"{meta_path} is not a prepared dataset's meta.json (a JSON object with a vocab_size and token counts); "
             f"prepare it again: `{prepare_command(settings['dataset'])}`")
    return meta


def run_config(settings):
    """The ModelConfig of a run's settings, with the vocabulary of its prepared dataset (GPT-2's where none is
    prepared); one line, as train.py says it, where a flag is not allowed."""
    from model import ModelConfig
    vocab = dataset_meta(settings).get("vocab_size", 50257)
    flags = {k: v for k, v in settings.items() if k in ModelConfig.flags() and v is not None}
    try:
        return ModelConfig(**{"vocab_size": vocab, **flags})
    except ValueError as e:
        fail(e)


def run_model(settings):
    """The model of a run's settings (run_config)."""
    from model import build_model
    return build_model(run_config(settings))


def run_cost(settings, max_iters):
    """(parameters, training FLOPs per token, FLOPs of the whole run): training, plus the evaluations' forward passes
    (a third of a training step's FLOPs per token; eval_iters batches of each split at step 0, every eval_interval
    and at the end; eval_iters=0: every val token of the prepared dataset and as many train windows, 512 at most)."""
    for key in ("batch_size", "gradient_accumulation_steps", "eval_interval", "eval_iters"):  # what the cost divides by
        if settings[key] < (key != "eval_iters"):
            fail(f"{key}={settings[key]!r} is not allowed; use a positive number" + " or 0" * (key == "eval_iters"))
    model = run_model(settings)
    T = model.config.context_size
    per_token = model.flops_per_token(T)
    tokens = max_iters * settings["batch_size"] * settings["gradient_accumulation_steps"] * T
    n_evals = max_iters // settings["eval_interval"] + 1 + (max_iters % settings["eval_interval"] != 0)
    val = dataset_meta(settings).get("val_tokens", 0)  # eval_iters=0 and no data prepared: unknown, counted as 0
    per_eval = (2 * settings["eval_iters"] * settings["batch_size"] * T if settings["eval_iters"] else
                val + min(512, val // T) * T)
    eval_tokens = n_evals * per_eval
    return model.num_params(), per_token, per_token * (tokens + eval_tokens / 3)


def measured_tokens_per_s(settings, steps=5):
    """Training tokens/s of a run's model on its device, dtype and compile setting: the median of `steps` timed
    steps of one micro-batch after two warm-up steps (the first compiles); on a CPU with one thread, as run_all runs
    each (--jobs of them at a time)."""
    import torch
    from lab.bench import Trainer
    model, threads = run_model(settings), torch.get_num_threads()
    device = settings.get("device", "cpu").split(":")[0]
    dtype = torch.bfloat16 if settings.get("dtype") == "bfloat16" else torch.float32
    trainer = Trainer(model.config, settings["batch_size"], device, dtype, settings.get("compile", False))
    torch.set_num_threads(1 if device == "cpu" else threads)
    try:
        times = [trainer.step() for _ in range(2 + steps)]
    finally:
        torch.set_num_threads(threads)
    return settings["batch_size"] * model.config.context_size / statistics.median(times[2:])


def plan(suite, runs, seeds, overrides, max_iters, n_parallel, can_measure, extra_seeds=()):
    """Prints what a suite will train and what it costs: FLOPs per run, and hours at the throughput measured on the
    device it will use, or (no such device here) at MEASURED_TOKENS_PER_S, measured on a named GPU. extra_seeds:
    seeds added for the runs that the first ones cannot tell from the baseline, at most every run's."""
    rows, total_flops, total_hours = [], 0, 0
    for run in runs:
        settings = run_settings(suite, run, overrides)
        iters = max_iters or settings["max_iters"]
        params, per_token, flops = run_cost(settings, iters)
        speed = measured_tokens_per_s(settings) if can_measure else (
            MEASURED_TOKENS_PER_S.get(settings["variant"], (None,))[0] if suite == "paper" else None)
        hours = flops / per_token / speed / 3600 if speed else None  # FLOPs / (FLOPs per token) = tokens, evals at 1/3
        rows.append((run, params, per_token, flops, speed, hours))
        total_flops += flops * len(seeds)
        total_hours += (hours or 0) * len(seeds)
    device = (f"{settings.get('device', 'cpu')}, {settings.get('dtype', 'float32')}"
              f"{', compiled' * bool(settings.get('compile'))}")
    print(f"{suite} study: {len(runs)} configurations x {len(seeds)} seeds (seeds {seeds}) = {len(runs) * len(seeds)} "
          f"runs of {iters:,} steps x {settings['batch_size'] * settings['gradient_accumulation_steps']} sequences x "
          f"{settings['context_size']} tokens, on data/{settings['dataset']}, {device}")
    print("| run | parameters | MFLOPs per token | PFLOPs per run (with evaluations) | "
          + ("measured tokens/s | hours per run |" if can_measure else "H200 tokens/s | H200 hours per run |"))
    print("|---" * 6 + "|")
    for run, params, per_token, flops, speed, hours in rows:
        print(f"| {run} | {params:,} | {per_token / 1e6:.1f} | {flops / 1e15:.1f} | "
              + (f"{speed:,.0f} | {hours:.2f} |" if speed else "not measured | |"))
    print(f"total: {total_flops:.2e} FLOPs")
    if can_measure:
        extra = total_hours / len(seeds) * len(extra_seeds) / n_parallel  # at most: every run given the extra seeds
        notes = ([f"up to {extra:.1f} h more for seeds {extra_seeds} where they are needed"] * bool(extra)
                 + [f"the evaluations are not counted until data/{settings['dataset']} is prepared"]
                 * (settings["eval_iters"] == 0 and not dataset_meta(settings)))  # whole-split ones: size unknown
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0  # no load average on Windows
        if device.startswith("cpu") and load > (os.cpu_count() or 1) - 0.5:
            notes.append(f"timed on a busy CPU (load {load:.1f} on {os.cpu_count()} cores): an idle one is faster")
        print(f"cost, at the tokens/s measured here ({device}{', one thread per run' * device.startswith('cpu')}): "
              f"{total_hours:.1f} device-hours; with {n_parallel} run(s) at a time, about "
              f"{total_hours / n_parallel:.1f} h" + "".join(f"; {note}" for note in notes), flush=True)
    else:
        speeds = "; ".join(f"{variant} {s[1]} {s[0]:,}" for variant, s in MEASURED_TOKENS_PER_S.items())
        missing = [row[0] for row in rows if not row[4]]
        print(f"cost, with no {settings['device']} device here to measure on, at the training tokens/s measured on "
              f"one NVIDIA H200 (torch 2.11, micro-batch 50 x 200, bf16: {speeds}): {total_hours:.1f} H200 GPU-hours; "
              f"one run per GPU, so N GPUs take 1/N of that; `python -m lab.gpu_check` on your GPU measures its own"
              + f"; not counted, with no speed measured at their shapes: {', '.join(missing)}" * bool(missing),
              flush=True)
    return total_flops, total_hours

# -----------------------------------------------------------------------------
# analysis


def load(results, runs, seeds, done_iters=None):
    """{run: {seed: log}} of the finished runs (log reaches done_iters(run), when given)."""
    logs = {}
    for run in runs:
        for seed in seeds:
            log = run_log(os.path.join(results, f"{run}_seed{seed}", "log.jsonl"))
            if log and (done_iters is None or log[-1]["iter"] >= done_iters(run)):
                logs.setdefault(run, {})[seed] = log
    return logs


def run_figures(log):
    """The figures of one run: best val loss (and where), final val and train loss, their gap, and the mean val loss
    over the last quarter of the run (less noisy than one evaluation when the learning rate stays high)."""
    best = min(log, key=lambda r: r["val_loss"])
    late = [r for r in log if r["iter"] >= 0.75 * log[-1]["iter"]]
    figures = {"best_val": best["val_loss"], "best_iter": best["iter"], "final_val": log[-1]["val_loss"],
               "late_val": sum(r["val_loss"] for r in late) / len(late),
               "final_train": log[-1]["train_loss"], "gap": log[-1]["val_loss"] - log[-1]["train_loss"],
               "embedding": log[-1].get("val_embedding_loss")}
    if all(type(r.get("val_loss_seen_ids")) in (int, float) for r in log):  # without the val ids never trained on
        figures.update(best_val_seen_ids=min(r["val_loss_seen_ids"] for r in log),
                       late_val_seen_ids=sum(r["val_loss_seen_ids"] for r in late) / len(late),
                       final_val_seen_ids=log[-1]["val_loss_seen_ids"])
    return figures


def t_two_sided_p(t, df):
    """P(|T| >= |t|) for Student's t with an integer number of degrees of freedom, in closed form (Abramowitz and
    Stegun 26.7.3-4, with theta = atan(|t| / sqrt(df))), so that no statistics library is needed."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0 if df > 1 else 0.0
    if df % 2:  # odd df: 2/pi (theta + sin cos (1 + 2/3 c2 + 2*4/(3*5) c2^2 + ...)), (df - 1) / 2 terms
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * c2
            total += term
        return 1 - 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, df // 2):  # even df: sin (1 + 1/2 c2 + 1*3/(2*4) c2^2 + ...), df / 2 terms
        term *= (2 * k - 1) / (2 * k) * c2
        total += term
    return 1 - math.sin(theta) * total


def t_quantile(level, df):
    """The t with P(|T| < t) = level (two-sided), by bisection on t_two_sided_p: 4.303 for level 0.95 and df 2."""
    low, high = 0.0, 1e7
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_two_sided_p(mid, df) > 1 - level else (low, mid)
    return (low + high) / 2


def paired_stats(d, level=0.95):
    """Mean of the paired differences d (one per seed), its standard error, t interval at level and two-sided p."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return {"n": len(d), "mean": d.mean() if len(d) else math.nan, "se": math.nan, "ci": (math.nan, math.nan),
                "p": math.nan, "wins": int((d < 0).sum())}
    se = d.std(ddof=1) / math.sqrt(len(d))
    half = t_quantile(level, len(d) - 1) * se
    p = t_two_sided_p(d.mean() / se, len(d) - 1) if se > 0 else 0.0
    return {"n": len(d), "mean": d.mean(), "se": se, "ci": (d.mean() - half, d.mean() + half), "p": p,
            "wins": int((d < 0).sum())}


def paired(logs, run, reference, key):
    """Mean of run - reference over the seeds both have, with its standard error, 95% t interval and p value."""
    seeds = sorted(set(logs.get(run, {})) & set(logs.get(reference, {})))
    return paired_stats([run_figures(logs[run][s])[key] - run_figures(logs[reference][s])[key] for s in seeds])


def finished(suite, results, seeds, extra_seeds, max_iters=None):
    """Whether every run a study would train is done in results: each run and picture at its seeds, and the extra
    seeds of the runs three seeds cannot tell from the baseline (close_runs), as main would train them."""
    s, iters = SUITES[suite], (lambda run: max_iters or suite_iters(suite, run))
    wanted = [(s["runs"], seeds), (s.get("pictures", []), seeds[:1])]
    base = load(results, s["runs"], seeds, iters)
    if extra_seeds and sum(map(len, base.values())) == len(s["runs"]) * len(seeds):
        close = close_runs(base, [run for run in s["runs"] if run != "baseline"])
        wanted.append((["baseline"] + close if close else [], extra_seeds))
    return all(sum(map(len, load(results, runs, seed_list, iters).values())) == len(runs) * len(seed_list)
               for runs, seed_list in wanted)


def close_runs(logs, runs):
    """The runs that three seeds cannot tell from the baseline: the 95% t interval of the paired best-val difference
    holds zero. With 3 seeds that interval is +-4.3 standard errors, so it takes in every run within two."""
    intervals = {run: paired(logs, run, "baseline", "best_val")["ci"] for run in runs}
    return [run for run, (low, high) in intervals.items() if not (low > 0 or high < 0)]


def holm(ps, alpha=0.05):
    """Holm's step-down correction over one family of p values. Sorted ascending, p_(1) <= ... <= p_(m), the one of rank
    i is rejected when every p_(j), j <= i, is at most alpha / (m - j + 1); its adjusted p value is
    max over j <= i of min(1, (m - j + 1) p_(j)). Each also gets the level of its adjusted interval:
    1 - alpha / (m - r + 1) with r its rank, or, past the first comparison not rejected (rank k), r = k. So an
    adjusted interval excludes zero exactly when Holm rejects: a rejected one at its own step's level, every other one
    at the level where the steps stopped (its p is at least p_(k), which is above alpha / (m - k + 1)).
    Returns [(rank, adjusted p, level)] in input order."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, adjusted, stop = [None] * m, 0.0, None
    for rank, i in enumerate(order, 1):
        adjusted = max(adjusted, min(1.0, (m - rank + 1) * ps[i]))
        if stop is None and adjusted > alpha:
            stop = rank  # the first comparison not rejected: the steps stop here
        out[i] = (rank, adjusted, 1 - alpha / (m - min(rank, stop or rank) + 1))
    return out


def verdict(ci):
    """The word for a claim "A is lower than B" from an interval of A - B: it holds when the interval lies below zero,
    is contradicted when it lies above, and is not detected otherwise."""
    return "holds" if ci[1] < 0 else "contradicted" if ci[0] > 0 else "not detected"


# The write-up's claims, each "A ends with a lower val loss than B", with the write-up's own A - B (its tables: one run
# each, 9,000 steps; None where it ran no such comparison). The primary family, declared first: the bare
# encoder-decoder and the suite's best encoder-decoder against the baseline; every other comparison is secondary.
PRIMARY = [("the bare encoder-decoder beats the baseline", "encdec_none", "baseline", 3.413 - 3.424),
           ("the best encoder-decoder beats the baseline", "best", "baseline", 3.378 - 3.424)]
SECONDARY = [
    ("MSE (x8) + pos sub beats the baseline", "encdec_mse_pos_sub", "baseline", 3.378 - 3.424),
    ("MSE (x8) + pos sub beats the smaller baseline", "encdec_mse_pos_sub", "smaller_baseline", 3.378 - 3.416),
    ("MSE (x8) + pos sub beats the 0.2 dropout baseline", "encdec_mse_pos_sub", "dropout_baseline", 3.378 - 3.406),
    ("MSE (x1) + pos sub beats the smaller baseline", "encdec_mse_pos_sub_coeff1", "smaller_baseline", 3.378 - 3.416),
    ("MSE (x1) + pos sub beats the 0.2 dropout baseline", "encdec_mse_pos_sub_coeff1", "dropout_baseline",
     3.378 - 3.406),
    ("the bare encoder-decoder beats the smaller baseline", "encdec_none", "smaller_baseline", 3.413 - 3.416),
    ("the MSE embedding loss helps", "encdec_mse", "encdec_none", 3.385 - 3.413),
    ("the cosine embedding loss helps", "encdec_cosine", "encdec_none", 3.387 - 3.413),
    ("MSE beats cosine", "encdec_mse", "encdec_cosine", 3.385 - 3.387),
    ("pos sub helps the encoder-decoder", "encdec_pos_sub", "encdec_none", 3.381 - 3.413),
    ("MSE (x8) helps, with pos sub", "encdec_mse_pos_sub", "encdec_pos_sub", 3.378 - 3.381),
    ("MSE (x1) helps, with pos sub", "encdec_mse_pos_sub_coeff1", "encdec_pos_sub", 3.378 - 3.381),
    ("MSE (x1) + pos sub beats the bare encoder-decoder", "encdec_mse_pos_sub_coeff1", "encdec_none", 3.378 - 3.413),
    ("coefficient 8 beats coefficient 1", "encdec_mse_pos_sub", "encdec_mse_pos_sub_coeff1", None),
    ("fixed LayerNorms in the embedding loss help", "encdec_mse_pos_sub_fixed_ln", "encdec_mse_pos_sub", None),
    ("pos sub helps the baseline", "baseline_pos_sub", "baseline", None),
    ("dropout helps the encoder-decoder", "encdec_dropout", "encdec_mse_pos_sub", None),
    ("the parallel encoder-decoder beats the baseline", "parallel", "baseline", None),
    # the control for "fits more slowly": the baseline at a learning rate whose train loss tracks the bare model's
    ("a baseline that fits as slowly beats the baseline", "baseline_slow", "baseline", None),
    ("the bare encoder-decoder beats a baseline that fits as slowly", "encdec_none", "baseline_slow", None),
    ("MSE (x1) + pos sub beats a baseline that fits as slowly", "encdec_mse_pos_sub_coeff1", "baseline_slow", None),
]


# The write-up's next steps (none of which it ran): the gpt2_next suite's claims, one family
NEXT_STEPS = [("2 + 6 layers beat 4 + 4", "encdec_none_2_6", "encdec_none", None),
              ("6 + 2 layers beat 4 + 4", "encdec_none_6_2", "encdec_none", None),
              ("2 + 6 layers beat the baseline", "encdec_none_2_6", "baseline", None),
              ("6 + 2 layers beat the baseline", "encdec_none_6_2", "baseline", None),
              ("rotary positions help the baseline", "baseline_rotary", "baseline", None),
              ("rotary positions help the bare encoder-decoder", "encdec_none_rotary", "encdec_none", None),
              ("with rotary positions, the bare encoder-decoder beats the baseline", "encdec_none_rotary",
               "baseline_rotary", None),
              ("with rotary positions, pos sub helps the baseline", "baseline_rotary_pos_sub", "baseline_rotary", None),
              ("with rotary positions, pos sub helps the encoder-decoder", "encdec_rotary_pos_sub",
               "encdec_none_rotary", None)]


def claim_rows(suite, logs):
    """Every comparison of a suite as a row: family, claim, A, B, figure, the write-up's A - B and the paired
    statistics, in the order they are declared. The discriminating figures of the primary comparisons (see
    fit_or_overfit) join the secondary family. The gpt2_next suite has the one family of NEXT_STEPS."""
    s = SUITES[suite]
    rows = []
    if suite == "gpt2_next":
        return [dict(family="next steps", claim=claim, a=a, b=b, figure=key, writeup=writeup,
                     **paired(logs, a, b, key)) for claim, a, b, writeup in NEXT_STEPS if a in logs and b in logs
                for key in s["figures"]]
    for family, claims in (("primary", PRIMARY), ("secondary", SECONDARY)):
        for claim, a, b, writeup in claims:
            a = s["best"] if a == "best" else a
            if family == "secondary" and (a, b) in [(s["best"], "baseline"), ("encdec_none", "baseline")]:
                continue  # already primary
            if a in logs and b in logs:
                rows += [dict(family=family, claim=claim, a=a, b=b, figure=key, writeup=writeup,
                              **paired(logs, a, b, key)) for key in s["figures"]]
    for claim, a, b, _ in PRIMARY:
        a = s["best"] if a == "best" else a
        if s.get("train_levels") and a in logs and b in logs:
            rows += [dict(family="secondary", claim=claim, a=a, b=b, figure=figure, writeup=None, **p)
                     for figure, p in fit_or_overfit(logs, a, b, s["train_levels"])]
    return rows


def with_holm(rows, alpha=0.05):
    """Adds to each row its raw verdict (95% interval), and within its family Holm's rank, adjusted p value, adjusted
    interval (the t interval at Holm's level for it) and adjusted verdict."""
    for family in dict.fromkeys(row["family"] for row in rows):
        members = [row for row in rows if row["family"] == family and row["n"] >= 2]
        for row, (rank, p_adj, level) in zip(members, holm([row["p"] for row in members], alpha)):
            half = t_quantile(level, row["n"] - 1) * row["se"]
            row.update(m=len(members), rank=rank, p_adj=p_adj, level=level,
                       ci_adj=(row["mean"] - half, row["mean"] + half))
            row["raw"], row["adjusted"] = verdict(row["ci"]), verdict(row["ci_adj"])
    return rows


def words(row):
    """The verdict in words: holds / contradicted after Holm, or not detected with the effects its adjusted interval
    (the one the verdict rests on) still allows."""
    if row["adjusted"] != "not detected":
        return row["adjusted"]
    low, high = row["ci_adj"]
    text = f"not detected; the adjusted interval allows {low:+.3f} to {high:+.3f}"
    if row["writeup"] is not None:
        inside = low <= row["writeup"] <= high
        text += f", {'including' if inside else 'excluding'} the write-up's {row['writeup']:+.3f}"
    return text


# -----------------------------------------------------------------------------
# fits more slowly, or overfits more slowly?


def step_at(log, level, key="train_loss"):
    """The first step at which log[key] falls to level (or, for a rising key such as the gap, rises to it), linearly
    interpolated between evaluations; None if it never gets there."""
    for r0, r1 in zip(log, log[1:]):
        if min(r0[key], r1[key]) <= level <= max(r0[key], r1[key]) and r0[key] != r1[key]:
            return r0["iter"] + (level - r0[key]) / (r1[key] - r0[key]) * (r1["iter"] - r0["iter"])
    return None


def value_at(log, step, key="val_loss"):
    """log[key] at a step, linearly interpolated between evaluations."""
    return float(np.interp(step, [r["iter"] for r in log], [r[key] for r in log]))


def smoothed_best(log, k=5):
    """The lowest point of the val loss smoothed by a centred moving average over k evaluations (where the window is
    whole): less biased low than the raw minimum of noisy evaluations, though a wide window also flattens the bottom."""
    val = np.array([r["val_loss"] for r in log])
    k = min(k, len(val))
    return np.convolve(val, np.ones(k) / k, mode="valid").min()


def fit_or_overfit(logs, run, reference, train_levels, gap=0.49, k=5):
    """The paired figures (run - reference, over seeds) that tell "fits the training text more slowly" from "overfits
    more slowly": val loss where each reaches the same train loss (each level in train_levels, and the run's own final
    train loss, where the reference reaches it), val loss at the step where the reference's val - train gap first
    reaches the write-up's 0.49, and the best val loss smoothed over k evaluations. A run that only fits more slowly
    matches the reference at equal train loss; one that overfits more slowly is lower there."""
    seeds = sorted(set(logs.get(run, {})) & set(logs.get(reference, {})))
    figures = []
    for level in train_levels:
        d = [value_at(logs[run][s], step_at(logs[run][s], level)) - value_at(logs[reference][s],
             step_at(logs[reference][s], level)) for s in seeds
             if step_at(logs[run][s], level) is not None and step_at(logs[reference][s], level) is not None]
        figures.append((f"val at train loss {level}", paired_stats(d)))
    d = [logs[run][s][-1]["val_loss"] - value_at(logs[reference][s], step_at(logs[reference][s],
         logs[run][s][-1]["train_loss"])) for s in seeds
         if step_at(logs[reference][s], logs[run][s][-1]["train_loss"]) is not None]
    figures.append(("val at its own final train loss", paired_stats(d)))
    gap_log = {s: [dict(r, gap=r["val_loss"] - r["train_loss"]) for r in logs[reference][s]] for s in seeds}
    steps = {s: step_at(gap_log[s], gap, key="gap") for s in seeds}
    found = [s for s in seeds if steps[s] is not None]
    d = [value_at(logs[run][s], steps[s]) - value_at(logs[reference][s], steps[s]) for s in found]
    mean_step = np.mean([steps[s] for s in found]) if found else math.nan
    figures.append((f"val at the step (mean {mean_step:.0f}) where the reference's gap reaches {gap}", paired_stats(d)))
    d = [smoothed_best(logs[run][s], k) - smoothed_best(logs[reference][s], k) for s in seeds]
    figures.append((f"best val, moving average of {k}", paired_stats(d)))
    return figures


# -----------------------------------------------------------------------------
# the regime, against the write-up's


def bigram_loss(train, val, vocab_size, discount=0.75):
    """Val loss (nats per token) of an interpolated Kneser-Ney bigram model fit on the training tokens, each val token
    predicted from the one before it; the continuation unigram is itself interpolated with the uniform distribution,
    so ids never seen in training keep some probability."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    pairs, counts = np.unique(train[:-1] * vocab_size + train[1:], return_counts=True)
    prev, nxt = pairs // vocab_size, pairs % vocab_size
    context_count = np.bincount(prev, weights=counts, minlength=vocab_size)  # c(v)
    followers = np.bincount(prev, minlength=vocab_size)  # distinct w after v
    continuation = np.bincount(nxt, minlength=vocab_size)  # distinct v before w
    # P_cont(w) = max(N(.w) - D, 0) / N(..) + D |{w: N(.w) > 0}| / N(..) / V
    p_cont = (np.maximum(continuation - discount, 0) + discount * (continuation > 0).sum() / vocab_size) / len(pairs)
    v, w = val[:-1], val[1:]
    idx = np.searchsorted(pairs, v * vocab_size + w)
    seen = (idx < len(pairs)) & (pairs[np.minimum(idx, len(pairs) - 1)] == v * vocab_size + w)
    c_vw = np.where(seen, counts[np.minimum(idx, len(pairs) - 1)], 0)
    c_v = context_count[v]
    # P(w|v) = max(c(vw) - D, 0) / c(v) + D N(v.) / c(v) P_cont(w), and P_cont(w) for a context never seen
    p = np.where(c_v > 0, (np.maximum(c_vw - discount, 0) + discount * followers[v] * p_cont[w]) / np.maximum(c_v, 1),
                 p_cont[w])
    return float(-np.log(p).mean())


# The write-up's regime: its baseline (its tables), its appendix schedule, and the token files of its repository's
# Wikipedia set (uint16: 76,553,660 and 8,683,560 bytes)
WRITE_UP = dict(params=16_036_800, vocab=50_257, n_embed=160, train_tokens=38_276_830, val_tokens=4_341_780,
                steps=9000, batch_tokens=50 * 16 * 200, val=3.424, train=2.937)


def regime(suite, logs):
    """The regime of a suite against the write-up's: parameters with and without the token embedding, tokens, passes,
    losses of the baseline, and a bigram model's val loss where the suite's data is prepared."""
    from model import ModelConfig, build_model
    namespace = run_settings(suite, "baseline")  # its config with the suite's overrides (gpt2_heldout's vocabulary)
    data = os.path.join(ROOT, "data", SUITES[suite]["dataset"])
    meta = dataset_meta(namespace)
    namespace["vocab_size"] = namespace.get("vocab_size") or meta.get("vocab_size", 50257)  # paper configs: the data's
    params = build_model(ModelConfig(**{k: v for k, v in namespace.items() if k in ModelConfig.flags()})).num_params()
    f = [run_figures(log) for log in logs.get("baseline", {}).values()]
    out = dict(params=params, params_no_embed=params - namespace["vocab_size"] * namespace["n_embed"],
               train_tokens=meta.get("train_tokens"), val_tokens=meta.get("val_tokens"),
               val_articles=meta.get("val_articles"),
               seen=suite_iters(suite, "baseline") * namespace["batch_size"] * namespace["context_size"]
               * namespace["gradient_accumulation_steps"],
               best_val=np.mean([x["best_val"] for x in f]) if f else None,
               gap=np.mean([x["gap"] for x in f]) if f else None)
    if meta:
        read = lambda split: np.fromfile(os.path.join(data, f"{split}.bin"), dtype=meta["dtype"])
        out["bigram"] = bigram_loss(read("train"), read("val"), meta["vocab_size"])
    return out


def against_baseline(logs, run, keys, reference="baseline"):
    """Table cells: the paired difference run - reference of each figure with its 95% interval."""
    cells = []
    for key in keys:
        p = paired(logs, run, reference, key)
        cells.append("–" if run == reference or p["n"] < 2 else
                     f"{p['mean']:+.4f} ({p['ci'][0]:+.4f}, {p['ci'][1]:+.4f})")
    return " | ".join(cells) + " |"


# gpt2_next's two tables: each run against the run it changes one thing of
NEXT_TABLES = {"Where to split 8 layers (4 + 4 is the bare encoder-decoder)": [
                   ("encdec_none_2_6", "encdec_none"), ("encdec_none", "baseline"), ("encdec_none_6_2", "encdec_none")],
               "Rotary positions, with and without pos sub": [
                   ("baseline_rotary", "baseline"), ("baseline_rotary_pos_sub", "baseline_rotary"),
                   ("encdec_none_rotary", "encdec_none"), ("encdec_rotary_pos_sub", "encdec_none_rotary")]}


def next_steps_tables(logs):
    """gpt2_next's tables: best and late val, final train loss, and the paired differences with the run each one
    changes, and with the baseline."""
    keys = ("best_val", "late_val")
    for title, pairs in NEXT_TABLES.items():
        print(f"\n{title}:\n\n| run | seeds | best val | late val | final train | against | "
              + " | ".join(f"{key.replace('_', ' ')} - it (95% CI)" for key in keys) + " | "
              + " | ".join(f"{key.replace('_', ' ')} - baseline (95% CI)" for key in keys) + " |")
        print("|---" * 10 + "|")
        for run, reference in [(run, reference) for run, reference in pairs if run in logs]:
            f = [run_figures(log) for log in logs[run].values()]
            print(f"| {run} | {len(f)} | " + " | ".join(f"{np.mean([x[k] for x in f]):.4f}" for k in
                                                       (*keys, "final_train")) + f" | {reference} | "
                  + against_baseline(logs, run, keys, reference) + " " + against_baseline(logs, run, keys))


def summary(suite, results, max_iters=None, seeds=None):
    """The tables of a suite's finished runs (those whose log reaches max_iters, or the suite's steps)."""
    s = SUITES[suite]
    seeds = seeds or s["seeds"] + s.get("extra_seeds", [])
    check_own_runs(suite, results, s["runs"] + s.get("pictures", []), seeds)
    logs = load(results, s["runs"], seeds, lambda run: max_iters or suite_iters(suite, run))
    if s.get("reference"):  # the runs it is compared with, from the suite that trained them
        reference_results = os.path.join(ROOT, SUITES[s["reference"]]["results"])
        check_own_runs(s["reference"], reference_results, ["baseline", "encdec_none"], seeds)
        reference = load(reference_results, ["baseline", "encdec_none"], seeds,
                         lambda run: max_iters or suite_iters(s["reference"], run))
        logs = {**reference, **logs}
    diffs = ("best_val", "late_val", "final_val")
    print("| run | seeds | best val | smoothed best val | at step | late val | final val | final train | val - train | "
          + " | ".join(f"{key.replace('_', ' ')} - baseline (95% CI)" for key in diffs) + " |")
    print("|---" * 12 + "|")
    for run in logs:
        f = [dict(run_figures(log), smoothed=smoothed_best(log)) for log in logs[run].values()]
        mean = {k: np.mean([x[k] for x in f])
                for k in ("best_val", "smoothed", "best_iter", "late_val", "final_val", "final_train", "gap")}
        sd = {k: np.std([x[k] for x in f], ddof=1) if len(f) > 1 else math.nan for k in mean}
        pm = lambda k: f"{mean[k]:.4f}" + (f" ± {sd[k]:.4f}" if len(f) > 1 else "")
        print(f"| {run} | {len(f)} | {pm('best_val')} | {pm('smoothed')} | {mean['best_iter']:.0f} | "
              f"{pm('late_val')} | "
              f"{pm('final_val')} | {pm('final_train')} | {mean['gap']:.3f} | " + against_baseline(logs, run, diffs))
    if all("best_val_seen_ids" in run_figures(log) for runs in logs.values() for log in runs.values()):
        keys = [f"{key}_seen_ids" for key in diffs]
        print("\nThe same without the val tokens whose id never occurs in training (no model can learn them):\n")
        print("| run | seeds | best val | late val | final val | "
              + " | ".join(f"{key.replace('_', ' ')} - baseline (95% CI)" for key in diffs) + " |")
        print("|---" * 8 + "|")
        for run in logs:
            f = [run_figures(log) for log in logs[run].values()]
            print(f"| {run} | {len(f)} | " + " | ".join(f"{np.mean([x[k] for x in f]):.4f}" for k in keys) + " | "
                  + against_baseline(logs, run, keys))
    if suite == "gpt2_next":
        next_steps_tables(logs)
    if suite == "paper":
        print("\nAgainst the write-up's figures (one run each; mean ± sd over seeds here):\n")
        print("| run | seeds | write-up val | late val | best val | final val | write-up train | final train |")
        print("|---" * 8 + "|")
        for run in [run for run in s["runs"] if run in logs]:
            f = [run_figures(log) for log in logs[run].values()]
            pm = lambda k: f"{np.mean([x[k] for x in f]):.4f}" + (
                f" ± {np.std([x[k] for x in f], ddof=1):.4f}" if len(f) > 1 else "")
            train_loss, val_loss = WRITE_UP_RUNS[run]
            print(f"| {run} | {len(f)} | {val_loss:.3f} | {pm('late_val')} | {pm('best_val')} | {pm('final_val')} | "
                  f"{train_loss:.3f} | {pm('final_train')} |")
    rows = with_holm(claim_rows(suite, logs))
    short = {run: len(logs.get(run, {})) for run in s["runs"] if len(logs.get(run, {})) < len(s["seeds"])}
    if short:  # a partial study: its verdicts may still change, and Holm's m counts only the comparisons it has
        print(f"\nInterim, not final: {len(short)} of the suite's {len(s['runs'])} runs have fewer than its "
              f"{len(s['seeds'])} seeds (" + ", ".join(f"{run} {n}" for run, n in short.items()) + "); a comparison "
              "needs 2 seeds to enter the claims table below.")
    print("\nClaims, A - B in val loss (nats/token), paired over seeds; Holm's correction within each family "
          "(m comparisons); a claim holds or is contradicted only when its adjusted interval excludes zero.\n")
    print("| family | claim | A - B | figure | seeds | mean | raw 95% CI | p | raw verdict | Holm rank/m, level | "
          "adjusted CI | adjusted p | verdict |")
    print("|---" * 13 + "|")
    for r in rows:
        if r["n"] < 2:
            continue
        print(f"| {r['family']} | {r['claim']} | {r['a']} - {r['b']} | {r['figure']} | {r['n']} | {r['mean']:+.4f} | "
              f"({r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}) | {r['p']:.3f} | {r['raw']} | {r['rank']}/{r['m']}, "
              f"{100 * r['level']:.2f}% | ({r['ci_adj'][0]:+.4f}, {r['ci_adj'][1]:+.4f}) | {r['p_adj']:.3f} | "
              f"{words(r)} |")
    g, w = regime(suite, logs), WRITE_UP
    data = (f"training tokens {g['train_tokens']:,} against {w['train_tokens']:,} "
            f"({g['train_tokens'] / g['params']:.2f} and {w['train_tokens'] / w['params']:.2f} per parameter); "
            f"validation tokens {g['val_tokens']:,} ({g['val_articles']} articles) against {w['val_tokens']:,}; "
            f"passes {g['seen'] / g['train_tokens']:.1f} against "
            f"{w['steps'] * w['batch_tokens'] / w['train_tokens']:.1f}"
            if g["train_tokens"] else f"tokens and passes: prepare data/{SUITES[suite]['dataset']} to see them")
    print(f"\nThe regime, baseline against the write-up's: parameters {g['params']:,} ({g['params_no_embed']:,} "
          f"without the token embedding) against {w['params']:,} ({w['params'] - w['vocab'] * w['n_embed']:,}); "
          f"{data}; " + (f"best val {g['best_val']:.3f} against {w['val']:.3f}; final val - train {g['gap']:.3f} "
                         f"against {w['val'] - w['train']:.3f}; " if g["best_val"] is not None else
                         "best val and final val - train: no finished baseline run yet; ")
          + (f"a Kneser-Ney bigram's val loss {g['bigram']:.3f}" if "bigram" in g
             else "(prepare the data for a bigram)"))
    return logs


def study_command(suite, options=()):
    """The command that runs the suite with options ("--key=value"), as a shell reads it."""
    return shlex.join(["python", "-m", "lab.study", f"--suite={suite}", *options])


def check_wikitext2_copy(path, split, option, suite, prepared=False):
    """Stop with one line unless path holds WikiText-2's `split` file, whatever its line endings (prepare_wikipedia.py
    reads a Windows copy as the same text): a suite's results are of that text. prepared: the suite's data is
    prepared already, so that the file would not be read (the fix says so)."""
    name, _, sha256 = WIKITEXT2_FILES[split]
    dataset = SUITES[suite]["dataset"]
    leave_out = (f"or leave out {option}: data/{dataset} is already prepared, and {option} is not read then"
                 if prepared else f"or leave out {option} to download it")
    if not os.path.isfile(path):
        fail(f"{option}={path} is not a file; give a copy of WikiText-2's {name}, {leave_out}")
    if hashlib.sha256(read_text(path).encode("utf-8")).hexdigest() != sha256:
        fail(f"{option}={path} is not WikiText-2's {name} (the sha256 of its text, line endings aside, is not "
             f"{sha256}), the text of the {suite} study; give a copy of that file, {leave_out}")


def check_inputs(suite, input_path, val_input, prepared):
    """The local copies of a suite's text (--input and --val_input), checked before anything runs, whether or not
    the suite's data is prepared already (a wrong file is a mistake either way; a prepared dataset is used as it is,
    which a note says). Returns the arguments that prepare the data from them, or None without --input."""
    s, dataset = SUITES[suite], SUITES[suite]["dataset"]
    heldout = "--wikitext2_val=test" in s.get("download", [])  # a held-out val text of its own: test.txt
    if val_input and not heldout:
        fail(f"--val_input is the held-out text of the "
             f"{' and '.join(n for n, x in SUITES.items() if '--wikitext2_val=test' in x.get('download', []))} "
             f"suites; the {suite} study has none: leave it out")
    if not input_path:
        if val_input:
            fail("--val_input goes with --input (a copy of WikiText-2's valid.txt); give both, or neither to download "
                 "them")
        return None
    if heldout and not val_input and not prepared:
        val_input = os.path.join(os.path.dirname(input_path), "test.txt")  # beside --input
    if "--wikitext103" not in s.get("download", []):  # a suite on WikiText-2: that text
        check_wikitext2_copy(input_path, "valid", "--input", suite, prepared)
        if val_input:
            check_wikitext2_copy(val_input, "test", "--val_input", suite, prepared)
    if prepared:
        given = "--input and --val_input are" if val_input else "--input is"
        print(f"note: data/{dataset} is already prepared, so {given} checked but not read (to prepare it again from "
              f"your copy, move data/{dataset} out of the way first)", flush=True)
        return None
    return [f"--input={input_path}", f"--name={dataset}"] + ["--val_input", val_input] * bool(val_input)


def main(argv=None):
    parser = argument_parser(__doc__, "python -m lab.study")  # no abbreviations: --seed is not --seeds
    parser.add_argument("--suite", default="gpt2", choices=sorted(SUITES), help="which study (default gpt2)")
    parser.add_argument("--results", default=None,
                        help="folder of the logs (default: the suite's own, e.g. lab/results/gpt2_study); a run "
                             "folder there counts only if the study can show it is its own: see above")
    parser.add_argument("--max_iters", type=int, default=None, help="steps per run (default: the suite's)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0 .. N-1 (default: the suite's)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time on a CPU, one thread each (on CUDA: "
                                                            "one run per visible GPU)")
    parser.add_argument("--input", default=None,
                        help="a local copy of WikiText-2's valid.txt to prepare the suite's data from, instead of "
                             "downloading it; checked to be that file even where the data is prepared already (it is "
                             "then not read)")
    parser.add_argument("--val_input", default=None, help="gpt2_heldout, gpt2_next: a local copy of WikiText-2's "
                                                          "test.txt (default: test.txt beside --input), checked so too")
    add_flag(parser, "--summary", "print the table of finished runs and stop")
    add_flag(parser, "--dry_run", "print the plan and its cost (the time of a few steps of each configuration, "
                                  "measured here), and stop")
    parser.add_argument("--pick_lr", default=None, help="comma-separated learning rates: pick the gpt2_heldout "
                                                        "control's (see pick_lr) and stop")
    args, overrides = parser.parse_known_args(argv)
    args.input, args.val_input = (path and os.path.abspath(path) for path in (args.input, args.val_input))
    overrides = [f"--{key}={text}" if key else text for key, text in split_args(overrides)]  # all as --key=value
    for key, _ in split_args(overrides):  # a mistyped study option: did you mean among its options and train.py's
        if key and key not in train_defaults():
            fail(unknown_argument(f"--{key}", [*train_defaults(), *(o[2:] for o in parser._option_string_actions)],
                                  "python -m lab.study"))
    check_overrides(overrides)  # once, before anything runs: a setting train.py would refuse is one line here
    # the commands it prints go on with this study: its options and settings that are not the defaults
    options = [f"--{key}={getattr(args, key)}" for key in ("results", "max_iters", "seeds", "jobs", "input",
                                                           "val_input")
               if getattr(args, key) != parser.get_default(key)]
    go_on = study_command(args.suite, options + overrides)
    table = study_command(args.suite, [option for option in options if option.startswith(
        ("--results=", "--max_iters=", "--seeds="))] + ["--summary"])
    suite = SUITES[args.suite]
    if args.jobs < 1:
        fail(f"--jobs={args.jobs} is not allowed; use 1 or more runs at a time")
    if args.max_iters is not None and args.max_iters < 1:
        fail(f"--max_iters={args.max_iters} is not allowed; use a positive number of steps, or leave it out for "
             f"the suite's")
    if args.seeds is not None and args.seeds < 2:
        fail(f"--seeds={args.seeds}: paired differences need at least 2 seeds")
    seeds = list(range(args.seeds)) if args.seeds else suite["seeds"]
    if args.pick_lr:
        try:
            rates = [float(rate) for rate in args.pick_lr.split(",")]
        except ValueError:
            rates = [math.nan]
        if not all(0 < rate < math.inf for rate in rates):
            fail(f"--pick_lr={args.pick_lr} is not a list of learning rates; give positive numbers separated by "
                 f"commas, e.g. --pick_lr=0.001,0.0015")
        pick_lr(rates, args.jobs)
        return 0
    results = os.path.join(ROOT, args.results or suite["results"])
    if args.summary:
        if not any(os.path.exists(os.path.join(results, name, "log.jsonl"))
                   for name in (os.listdir(results) if os.path.isdir(results) else [])):
            fail(f"no runs in {os.path.relpath(results)}/ yet; "
                 f"train them with `{go_on}`")
        summary(args.suite, results, args.max_iters, seeds if args.seeds else None)
        return 0
    max_iters = args.max_iters or suite.get("max_iters")
    device = run_settings(args.suite, suite["runs"][0], overrides).get("device", "cpu")
    gpus = []
    if device.startswith("cuda"):  # one run per visible GPU, each seeing only its own
        import torch
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = (visible.split(",") if visible else list(range(8 * 64)))[:torch.cuda.device_count()]
    extra_seeds = [] if args.seeds else suite.get("extra_seeds", [])
    if suite.get("gpu") or args.dry_run:
        plan(args.suite, suite["runs"], seeds, overrides, max_iters, len(gpus) or args.jobs,
             can_measure=device == "cpu" or bool(gpus), extra_seeds=extra_seeds)
    if args.dry_run:
        return 0
    if device.startswith("cuda") and not gpus:
        fail(f"the {args.suite} suite trains on CUDA and no GPU is visible here; see its plan and cost with --dry_run, "
             f"or run it tiny on the CPU with --device=cpu --dtype=float32 --compile=False (docs/reproduce.md)")
    for run in suite["runs"] + suite.get("pictures", []):  # every run's model flags, before the first run starts
        run_config(run_settings(args.suite, run, overrides))
    prepared = bool(dataset_meta({"dataset": suite["dataset"]}))  # meta.json: the last file a preparation writes
    source = check_inputs(args.suite, args.input, args.val_input, prepared)
    check_own_runs(args.suite, results, suite["runs"] + suite.get("pictures", []),
                   seeds + suite.get("extra_seeds", []), overrides)
    if finished(args.suite, results, seeds, extra_seeds, max_iters):  # as from a fresh clone: no data needed
        print(f"every run of the {args.suite} study is done in {os.path.relpath(results)}/ (its logs count, the "
              f"committed ones too): the table is `{table}`; to train it "
              f"all again, give a folder of your own, --results=NEW_FOLDER", flush=True)
        return 0
    command = " ".join(["study.py", *(argv if argv is not None else sys.argv[1:])])
    if os.path.isdir(results):  # one study at a time in a results folder: a second one stops before it prepares
        hold_folder(results, "--results", command)
    if not prepared:
        source = source or suite.get("download", ["--wikitext2=valid"])
        if subprocess.run([sys.executable, "prepare_wikipedia.py", *source, *suite["prepare"]], cwd=ROOT).returncode:
            fail(f"could not prepare data/{suite['dataset']}; see the message above")
    make_folder(results, "--results")  # once every check has passed: a refused start leaves no empty folder
    hold_folder(results, "--results", command)
    core = suite["runs"][:suite.get("core", 0)]
    groups = [core, [run for run in suite["runs"] if run not in core]]  # the core first: its verdicts come first
    pictures = [(run, seeds[0]) for run in suite.get("pictures", [])]  # one seed each, before the rest
    print(f"{args.suite} study: {len(suite['runs']) * len(seeds) + len(pictures)} runs into {os.path.relpath(results)}/"
          + (f" ({len(gpus)} GPU(s), one run on each)" if gpus else f" ({args.jobs} at a time)")
          + (f", and seeds {extra_seeds} where needed" if extra_seeds else "")
          + "; finished ones are kept (use --results=FOLDER to train them all again)", flush=True)
    failed = run_all(args.suite, results, pictures, max_iters, args.jobs, overrides, gpus, go_on) if pictures else 0
    for group in filter(None, groups):
        # seed by seed: a partial study covers every run
        jobs = [(run, seed) for seed in seeds for run in group]
        failed += run_all(args.suite, results, jobs, max_iters, args.jobs, overrides, gpus, go_on)
        if extra_seeds and not failed:  # more seeds where three cannot tell a run from the baseline
            close = close_runs(load(results, suite["runs"], seeds), [r for r in group if r != "baseline"])
            print(f"not told from the baseline after {len(seeds)} seeds: {', '.join(close) or 'none'}")
            extra = [(run, seed) for seed in extra_seeds for run in (["baseline"] + close if close else [])]
            failed += run_all(args.suite, results, extra, max_iters, args.jobs, overrides, gpus, go_on)
    print(f"study done{f', {failed} run(s) FAILED' if failed else ''}; the table: `{table}`")
    return 1 if failed else 0


if __name__ == "__main__":
    on_ctrl_c("the runs finished so far are kept; run the same command again to go on")  # also SIGTERM, SIGHUP
    sys.exit(main())
