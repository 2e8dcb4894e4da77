"""
The comparisons of the write-up "Auto-regressive Encoder-Decoder Transformer", re-run at CPU scale with several
random seeds, through train.py: two suites, each resumable (run the same command again after an interruption).

    python study.py --suite=gpt2     # GPT-2 tokens, many passes, overfitting: the write-up's regime (~4 h on 2 cores)
    python study.py --suite=gpt2_long  # three of its runs to 3,000 steps: where val loss turns (~3 h)
    python study.py --suite=byte     # byte tokens, under one pass: early learning speed (~45 min)
    python study.py --suite=gpt2 --summary           # the table of results so far, with paired differences
    python study.py --suite=gpt2 --results=my_rerun  # train everything again into another folder

Logs go to results/<suite>_study/<run>_seed<N>/log.jsonl (read by notebooks/loss_curves.ipynb); a run whose log
reaches max_iters is done, one with a checkpoint resumes from it. Checkpoints stay next to the logs (git ignores
them), for evaluate.py and sample.py, and so that a run can be extended exactly by raising max_iters.
Runs with the same seed see the same batches, so each comparison is made seed by seed (paired).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from configurator import read_config
from data import read_log

ROOT = os.path.dirname(os.path.abspath(__file__))
SUITES = {
    # config/cpu_<run>.py, 200 steps (the configs say 300), seeds 0-2
    "byte": dict(results="results/cpu_study", config="cpu_", seeds=[0, 1, 2], max_iters=200,
                 dataset="wikitext2_valid_byte", prepare=["--tokenizer=byte"],
                 runs=["baseline", "smaller_baseline", "dropout_baseline", "encdec_none", "encdec_mse", "encdec_cosine",
                       "encdec_pos_sub", "encdec_mse_pos_sub", "parallel", "baseline_pos_sub"]),
    # config/cpu_gpt2_<run>.py as written; the first five are the core, run first for seeds 0-2 and then seeds 3 and 4
    # for every core run not told from the baseline by then (see close_runs); then the rest alike
    "gpt2": dict(results="results/gpt2_study", config="cpu_gpt2_", seeds=[0, 1, 2], extra_seeds=[3, 4], max_iters=None,
                 dataset="wikitext2_valid_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"], core=5,
                 runs=["baseline", "encdec_none", "encdec_mse_pos_sub", "encdec_mse_pos_sub_coeff1",
                       "encdec_mse_pos_sub_fixed_ln", "smaller_baseline", "dropout_baseline", "encdec_pos_sub",
                       "encdec_mse", "encdec_dropout", "baseline_pos_sub", "parallel", "encdec_cosine"]),
    # the same configs run 2.5 times longer (3,000 steps, ~25 passes), to see where val loss turns and whether the
    # encoder-decoder holds off overfitting; same batches and schedule as the gpt2 suite's runs, equal to float
    # rounding; seeds 3 and 4 by the same rule as the gpt2 suite. A run starts from the gpt2 suite's finished
    # checkpoint of the same config and seed where there is one (extends): the same run, 1,200 steps cheaper
    "gpt2_long": dict(results="results/gpt2_long", config="cpu_gpt2_", seeds=[0, 1, 2], extra_seeds=[3, 4],
                      max_iters=3000, extends="gpt2",
                      dataset="wikitext2_valid_gpt2c", prepare=["--tokenizer=gpt2", "--compact_vocab"], core=3,
                      runs=["baseline", "encdec_none", "encdec_mse_pos_sub_coeff1"]),
}


def config_value(suite, run, key):
    """A setting of config/<prefix><run>.py, read as train.py reads it."""
    return read_config(os.path.join(ROOT, "config", f"{SUITES[suite]['config']}{run}.py"))[key]


def suite_iters(suite, run):
    """The steps of one run of a suite: the suite's max_iters, or the run's config's where the suite sets none."""
    return SUITES[suite]["max_iters"] or config_value(suite, run, "max_iters")


def run_dir(results, run, seed):
    return os.path.join(results, f"{run}_seed{seed}")


def start_from_shorter_run(suite, run, seed, out_dir):
    """Copy the finished run of the suite this one extends (same config and seed) into out_dir, to be resumed from:
    batches and learning rate depend only on (seed, step), so it is the same run without the cost of its first steps.
    Returns the step it starts at, or None where there is no such run."""
    shorter = SUITES[suite].get("extends")
    if not shorter:
        return None
    src = run_dir(os.path.join(ROOT, SUITES[shorter]["results"]), run, seed)
    log = read_log(os.path.join(src, "log.jsonl"))[0]
    if not (log and log[-1]["iter"] >= suite_iters(shorter, run) and os.path.exists(os.path.join(src, "ckpt.pt"))):
        return None
    os.makedirs(out_dir, exist_ok=True)
    for name in ("log.jsonl", "ckpt.pt"):  # the checkpoint last: a copy cut short leaves none, and is made again
        shutil.copyfile(os.path.join(src, name), os.path.join(out_dir, name + ".tmp"))
        os.replace(os.path.join(out_dir, name + ".tmp"), os.path.join(out_dir, name))
    return log[-1]["iter"]


def train(suite, results, run, seed, max_iters):
    out_dir = run_dir(results, run, seed)
    log = read_log(os.path.join(out_dir, "log.jsonl"))[0]
    if log and log[-1]["iter"] >= max_iters:
        return "done before", log[-1]
    ckpt = os.path.join(out_dir, "ckpt.pt")
    started_at = None if os.path.exists(ckpt) else start_from_shorter_run(suite, run, seed, out_dir)
    resume = os.path.exists(ckpt)
    cmd = [sys.executable, "train.py", f"config/{SUITES[suite]['config']}{run}.py", f"--seed={seed}",
           f"--out_dir={os.path.relpath(out_dir, ROOT)}", f"--max_iters={max_iters}"]
    if suite == "byte":  # a shorter study keeps the configs' schedule shape: the cosine reaches min_lr at the last step
        cmd += [f"--lr_decay_iters={max_iters}", f"--eval_interval={max(1, max_iters // 4)}"]
    cmd += ["--init_from=resume"] if resume else []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.time()
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        return f"FAILED ({' '.join(cmd[1:])}):\n{(result.stdout + result.stderr)[-2000:]}", None
    note = (f" (from the {SUITES[suite]['extends']} suite's step {started_at})" if started_at is not None
            else " (resumed)" if resume else "")
    return f"{time.time() - t0:.0f}s{note}", read_log(os.path.join(out_dir, "log.jsonl"))[0][-1]


def run_all(suite, results, jobs, max_iters, n_jobs):
    start, failed = time.time(), 0
    with ThreadPoolExecutor(n_jobs) as pool:
        futures = [pool.submit(train, suite, results, run, seed, max_iters or suite_iters(suite, run))
                   for run, seed in jobs]
        for i, ((run, seed), future) in enumerate(zip(jobs, futures), 1):
            status, last = future.result()
            failed += last is None
            losses = f"train {last['train_loss']:.4f}, val {last['val_loss']:.4f}; " if last else ""
            print(f"[{i:2d}/{len(jobs)}] {run} seed {seed}: {losses}{status}; {(time.time() - start) / 60:.1f} min so far",
                  flush=True)
    return failed


# -----------------------------------------------------------------------------
# analysis


def load(results, runs, seeds, done_iters=None):
    """{run: {seed: log}} of the finished runs (log reaches done_iters(run), when given)."""
    logs = {}
    for run in runs:
        for seed in seeds:
            log = read_log(os.path.join(results, f"{run}_seed{seed}", "log.jsonl"))[0]
            if log and (done_iters is None or log[-1]["iter"] >= done_iters(run)):
                logs.setdefault(run, {})[seed] = log
    return logs


def run_figures(log):
    """The figures of one run: best val loss (and where), final val and train loss, their gap, and the mean val loss
    over the last quarter of the run (less noisy than one evaluation when the learning rate stays high)."""
    best = min(log, key=lambda r: r["val_loss"])
    late = [r["val_loss"] for r in log if r["iter"] >= 0.75 * log[-1]["iter"]]
    return {"best_val": best["val_loss"], "best_iter": best["iter"], "final_val": log[-1]["val_loss"],
            "late_val": sum(late) / len(late),
            "final_train": log[-1]["train_loss"], "gap": log[-1]["val_loss"] - log[-1]["train_loss"],
            "embedding": log[-1].get("val_embedding_loss")}


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t quantiles, 95% two-sided


def paired(logs, run, reference, key):
    """Mean of run - reference over the seeds both have, with its standard error and 95% interval (t)."""
    seeds = sorted(set(logs.get(run, {})) & set(logs.get(reference, {})))
    d = np.array([run_figures(logs[run][s])[key] - run_figures(logs[reference][s])[key] for s in seeds])
    if len(d) < 2:
        return {"n": len(d), "mean": d.mean() if len(d) else math.nan, "se": math.nan, "ci": (math.nan, math.nan)}
    se = d.std(ddof=1) / math.sqrt(len(d))
    half = T95.get(len(d) - 1, 1.96) * se
    return {"n": len(d), "mean": d.mean(), "se": se, "ci": (d.mean() - half, d.mean() + half), "wins": int((d < 0).sum())}


def close_runs(logs, runs):
    """The runs that three seeds cannot tell from the baseline: the 95% t interval of the paired best-val difference
    holds zero. With 3 seeds that interval is +-4.3 standard errors, so it takes in every run within two."""
    intervals = {run: paired(logs, run, "baseline", "best_val")["ci"] for run in runs}
    return [run for run, (low, high) in intervals.items() if not (low > 0 or high < 0)]


def summary(suite, results):
    s = SUITES[suite]
    logs = load(results, s["runs"], s["seeds"] + s.get("extra_seeds", []), lambda run: suite_iters(suite, run))
    diffs = ("best_val", "late_val", "final_val")
    print("| run | seeds | best val | at step | late val | final val | final train | val - train | "
          + " | ".join(f"{key.replace('_', ' ')} - baseline (95% CI)" for key in diffs) + " |")
    print("|---" * 11 + "|")
    for run in s["runs"]:
        if run not in logs:
            continue
        f = [run_figures(log) for log in logs[run].values()]
        mean = {k: np.mean([x[k] for x in f]) for k in ("best_val", "best_iter", "late_val", "final_val", "final_train", "gap")}
        sd = {k: np.std([x[k] for x in f], ddof=1) if len(f) > 1 else math.nan for k in mean}
        cells = []
        for key in diffs:
            p = paired(logs, run, "baseline", key)
            cells.append("–" if run == "baseline" or p["n"] < 2 else
                         f"{p['mean']:+.4f} ({p['ci'][0]:+.4f}, {p['ci'][1]:+.4f}), {p['wins']}/{p['n']} lower")
        pm = lambda k: f"{mean[k]:.4f}" + (f" ± {sd[k]:.4f}" if len(f) > 1 else "")
        print(f"| {run} | {len(f)} | {pm('best_val')} | {mean['best_iter']:.0f} | {pm('late_val')} | "
              f"{pm('final_val')} | {pm('final_train')} | {mean['gap']:.3f} | " + " | ".join(cells) + " |")
    return logs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="gpt2", choices=sorted(SUITES), help="which study (default gpt2)")
    parser.add_argument("--results", default=None, help="folder of the logs (default results/<suite>_study)")
    parser.add_argument("--max_iters", type=int, default=None, help="steps per run (default: the suite's)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one CPU thread each")
    parser.add_argument("--input", default=None, help="a local copy of WikiText-2's valid.txt, instead of downloading it")
    parser.add_argument("--summary", action="store_true", help="print the table of finished runs and stop")
    args = parser.parse_args()
    suite = SUITES[args.suite]
    results = os.path.join(ROOT, args.results or suite["results"])
    if args.summary:
        summary(args.suite, results)
        sys.exit(0)
    if not os.path.exists(os.path.join(ROOT, "data", suite["dataset"], "train.bin")):
        source = [f"--input={args.input}", f"--name={suite['dataset']}"] if args.input else ["--wikitext2=valid"]
        if subprocess.run([sys.executable, "prepare_wikipedia.py", *source, *suite["prepare"]], cwd=ROOT).returncode:
            sys.exit(f"error: could not prepare data/{suite['dataset']}; see the message above")
    max_iters = args.max_iters or suite.get("max_iters")
    core = suite["runs"][:suite.get("core", 0)]
    groups = [core, [run for run in suite["runs"] if run not in core]]  # the core first: its verdicts come first
    print(f"{args.suite} study: {len(suite['runs']) * len(suite['seeds'])} runs into {os.path.relpath(results)}/, and "
          f"seeds {suite.get('extra_seeds', [])} where needed; finished ones are kept "
          f"(use --results=FOLDER to train them all again)", flush=True)
    failed = 0
    for group in filter(None, groups):
        # seed by seed: a partial study covers every run
        jobs = [(run, seed) for seed in suite["seeds"] for run in group]
        failed += run_all(args.suite, results, jobs, max_iters, args.jobs)
        if suite.get("extra_seeds") and not failed:  # more seeds where three cannot tell a run from the baseline
            close = close_runs(load(results, suite["runs"], suite["seeds"]), [r for r in group if r != "baseline"])
            print(f"not told from the baseline after {len(suite['seeds'])} seeds: {', '.join(close) or 'none'}")
            extra = [(run, seed) for seed in suite["extra_seeds"] for run in (["baseline"] + close if close else [])]
            failed += run_all(args.suite, results, extra, max_iters, args.jobs)
    print(f"study done{f', {failed} run(s) FAILED' if failed else ''}; the table: python study.py --suite={args.suite} --summary")
    sys.exit(1 if failed else 0)
