"""
Seed 001's comparisons at CPU scale: every run below x 3 seeds through train.py, 2 at a time, one thread each.

    python study.py                  # -> results/cpu_study/<run>_seed<N>/log.jsonl, read by notebooks/loss_curves.ipynb
    python study.py --max_iters=300  # the config files' own length (about 1.5x the wall time)

A run whose log already reaches max_iters is skipped, so an interrupted study resumes where it stopped.
Checkpoints are deleted after each run: only the small logs are kept.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# config/cpu_<run>.py, in the order of seed 001's tables; baseline_pos_sub is new (the seed proposed it, never ran it)
RUNS = ["baseline", "smaller_baseline", "dropout_baseline", "encdec_none", "encdec_mse", "encdec_cosine",
        "encdec_pos_sub", "encdec_mse_pos_sub", "parallel", "baseline_pos_sub"]
SEEDS = [0, 1, 2]
RESULTS = "results/cpu_study"
ROOT = os.path.dirname(os.path.abspath(__file__))


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train(run, seed, max_iters):
    out_dir = os.path.join(RESULTS, f"{run}_seed{seed}")
    log = read_log(os.path.join(ROOT, out_dir, "log.jsonl"))
    if log and log[-1]["iter"] >= max_iters:
        return "skipped (done)", log[-1]
    # a shorter study keeps the configs' schedule shape: the cosine reaches min_lr at the last step
    cmd = [sys.executable, "train.py", f"config/cpu_{run}.py", f"--seed={seed}", f"--out_dir={out_dir}",
           f"--max_iters={max_iters}", f"--lr_decay_iters={max_iters}", f"--eval_interval={max(1, max_iters // 4)}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.time()
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    ckpt = os.path.join(ROOT, out_dir, "ckpt.pt")
    if os.path.exists(ckpt):
        os.remove(ckpt)
    if result.returncode:
        return f"FAILED ({' '.join(cmd[1:])}):\n{(result.stdout + result.stderr)[-2000:]}", None
    return f"{time.time() - t0:.0f}s", read_log(os.path.join(ROOT, out_dir, "log.jsonl"))[-1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max_iters", type=int, default=200, help="steps per run (the config files say 300)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one CPU thread each")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(ROOT, "data", "wikitext2", "train.bin")):
        subprocess.run([sys.executable, "prepare_wikipedia.py", "--input", "../shared/data/wikitext-2/valid.txt",
                        "--name=wikitext2", "--tokenizer=byte"], cwd=ROOT, check=True)
    jobs = [(run, seed) for seed in SEEDS for run in RUNS]  # seed by seed: a partial study still covers every run
    start, failed = time.time(), 0
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(train, run, seed, args.max_iters) for run, seed in jobs]
        for i, ((run, seed), future) in enumerate(zip(jobs, futures), 1):
            status, last = future.result()
            failed += last is None
            losses = f"train {last['train_loss']:.4f}, val {last['val_loss']:.4f}; " if last else ""
            print(f"[{i:2d}/{len(jobs)}] {run} seed {seed}: {losses}{status}; {(time.time() - start) / 60:.1f} min so far", flush=True)
    print(f"study done: {len(jobs) - failed}/{len(jobs)} runs in {(time.time() - start) / 60:.1f} min of wall time")
    sys.exit(1 if failed else 0)
