"""
The first command to run on a machine with a CUDA GPU: does everything that needs one work there, and how fast?

    python -m lab.gpu_check               # meant for 6 minutes or less on one H100; its work in gpu_check/
    python -m lab.gpu_check --jobs=2      # fewer steps at a time, if GPU memory is short
    python -m lab.gpu_check --only=race   # the steps whose names match a regular expression

Its steps, each in a process of its own with its own time limit (output: gpu_check/logs/<step>.<n>.txt):
  train <variant> <dtype> <eager|compiled>  a few optimizer steps of config/paper_<variant>.py, bfloat16 and float16
  resume float16      the reversal task trained N steps straight, and N/2 then resumed: the same losses, exactly
  ddp torchrun        torchrun with DDP on one GPU: the losses of one plain process
  accumulation compiled  the encoder-decoder's step compiled at 1 x 32 sequences (CUDA graphs) and at 4 x 8
                      (gradient accumulation): the gradient norms of the eager 1 x 32 step
  race train          lab.bench --train_only --compile: tokens/s against Hugging Face's GPT-2, MFU of the
                      write-up's optimizer step
  race decode         lab.bench --decode_only: decoding with the KV cache against Hugging Face's GPT-2
It needs no download: the training steps read a generated dataset of random GPT-2 token ids (data/gpu_check).
It prints one table, a row per step as it ends: ok, short (it ran, and a figure missed its target) or FAIL (an
error or its time limit: the last line of its output). Exit status 1 if any step failed, else 0; without a CUDA GPU,
one line and exit status 1. The table is also written to gpu_check/summary.json. Ctrl-C (or SIGTERM, SIGHUP) stops the
check and every running step, whose whole process group gets SIGTERM, then SIGKILL 5 s later: one line, exit status 130.
"""
import argparse
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # also as `python lab/gpu_check.py`
from machinery.files import write_atomic  # noqa: E402
from machinery.process import fail  # noqa: E402
from configurator import add_flag, argument_parser  # noqa: E402
from machinery.process import on_ctrl_c  # noqa: E402

VARIANTS = {"baseline": "config/paper_baseline.py", "encdec": "config/paper_encdec_mse_pos_sub.py",
            "parallel": "config/paper_parallel.py"}
# the write-up's micro-batch, whatever the config's: a few GB each, so that several runs share one GPU's memory
MICRO_BATCH = ["--batch_size=50", "--gradient_accumulation_steps=2"]
# --tiny (how the tests check this script on a CPU): the same steps, at a few thousand parameters
TINY_MODEL = ["--n_layer=1", "--n_embed=40", "--n_head=2", "--context_size=32", "--batch_size=2",
              "--gradient_accumulation_steps=2"]
TINY_REVERSAL = ["--n_layer=1", "--n_embed=32", "--n_head=2", "--batch_size=8"]


def write_dataset(folder, vocab_size, tokenizer, n_train, n_val):
    """data/<name> as prepare_wikipedia.py writes it, of random token ids: the shapes and speed of real text."""
    os.makedirs(folder, exist_ok=True)
    meta = {"tokenizer": tokenizer, "vocab_size": vocab_size, "eot_token": vocab_size - 1 if vocab_size > 256 else 0,
            "dtype": "uint16"}
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        ids = rng.integers(0, vocab_size, n, dtype=np.uint16)
        write_atomic(os.path.join(folder, f"{split}.bin"), ids.tobytes())
        meta[f"{split}_tokens"], meta[f"{split}_token_sum"] = n, int(ids.sum(dtype=np.uint64))
    write_atomic(os.path.join(folder, "meta.json"), json.dumps(meta, indent=2).encode())


STOP, RUNNING, STARTING = threading.Event(), set(), threading.Lock()  # a stop: no step starts; the steps running
STOP_WAIT = 5  # seconds a step has, once stopped (Ctrl-C) or out of time, to end before its process group is killed


def run_command(command, output, timeout, cwd, env):
    """(exit status or None if it ran out of time or was stopped, seconds) of command, its output into the file
    `output`. It runs in a process group of its own, ended whole (as `timeout -k 5`): torch.compile's worker processes
    outlive their parent and would keep a pipe open, so the output goes to a file, and what is left of the group is
    killed. Its own session keeps the terminal's Ctrl-C from it: stop_steps passes a stop on. Once stopped, it runs
    nothing."""
    start = time.time()
    with open(output, "w") as f:
        with STARTING:  # stop_steps either sees this process or keeps it from starting
            if STOP.is_set():
                return None, 0.0
            process = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                       start_new_session=True)
            RUNNING.add(process)
        status = None
        try:
            status = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also a stop while this thread (the main one: a race) waits
            end_group(process, STOP_WAIT)
            RUNNING.discard(process)
    return (None if STOP.is_set() else status), time.time() - start


def signal_group(process, signum):
    """Send signum to process's group; whether any of the group was still there."""
    try:
        os.killpg(process.pid, signum)
        return True
    except ProcessLookupError:
        return False


def end_group(process, wait):
    """End process, if it still runs (SIGTERM to its group, then SIGKILL after `wait` seconds), and whatever of its
    group is left after it (SIGKILL until none is, 5 s at most)."""
    if process.poll() is None:
        signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
    process.wait()
    deadline = time.time() + 5
    while time.time() < deadline and signal_group(process, signal.SIGKILL):
        time.sleep(0.05)


def stop_steps():
    """A stop (Ctrl-C, SIGTERM, SIGHUP) reaches every step: none starts from now on, and each running one's process
    group gets SIGTERM, then SIGKILL after STOP_WAIT seconds; returns once they have ended."""
    with STARTING:
        STOP.set()
        running = list(RUNNING)
    for process in running:
        signal_group(process, signal.SIGTERM)
    deadline = time.time() + STOP_WAIT
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()


def last_line(path):
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1][:100] if lines else "(no output)"


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def losses(records):
    return [(r["iter"], r["train_loss"], r["val_loss"]) for r in records]


class Step:
    """A step of the check: commands run one after another (within one time limit), then check(outputs) gives
    (status, figure): ok, short or FAIL."""

    def __init__(self, name, commands, timeout, check):
        self.name, self.commands, self.timeout, self.check = name, commands, timeout, check

    def run(self, out, env, force_failure=False):
        outputs, start = [], time.time()
        slug = re.sub(r"\W+", "_", self.name)
        for i, command in enumerate(self.commands):
            outputs.append(os.path.join(out, "logs", f"{slug}.{i}.txt"))
            command = command + ["--forced_failure=True"] * force_failure  # an unknown flag: a real failure
            left = self.timeout - (time.time() - start)
            status, _ = run_command(command, outputs[-1], max(left, 1), out, env)
            if status != 0:
                why = f"no end after {self.timeout} s" if status is None else last_line(outputs[-1])
                return "FAIL", why, time.time() - start
        try:
            status, figure = self.check(outputs)
        except Exception as e:  # a missing or unreadable result: the step did not do its work
            status, figure = "FAIL", f"{type(e).__name__}: {e}"
        return status, figure, time.time() - start


def train_figure(log_path):
    def check(outputs):  # not its tokens/s: over 3 steps, that is mostly compilation (the races time the speed)
        last = read_log(log_path)[-1]
        return "ok", f"train loss {last['train_loss']:.3f}, val loss {last['val_loss']:.3f} at step {last['iter']}"
    return check


def steps(args, python):
    """The check's steps: those that may run side by side, and those that run alone (timings)."""
    device, tiny = args.device, args.tiny
    train = [python, os.path.join(ROOT, "train.py")]
    model_flags = TINY_MODEL if tiny else []
    reversal = ["--dataset=reversal", f"--device={device}", "--overwrite=True", "--log_interval=1000"] + (
        TINY_REVERSAL if tiny else [])
    side_by_side = []
    for compiled in (True, False):  # the compiled ones first: the longest
        for variant, config in VARIANTS.items():
            for dtype in ("bfloat16", "float16"):
                name = f"train {variant} {dtype} {'compiled' if compiled else 'eager'}"
                run_dir = os.path.join("runs", re.sub(r"\W+", "_", name))
                command = train + [os.path.join(ROOT, config), "--dataset=gpu_check", f"--out_dir={run_dir}",
                                   f"--device={device}", f"--dtype={dtype}", f"--compile={compiled}",
                                   "--max_iters=3", "--eval_interval=3", "--eval_iters=2", "--log_interval=1",
                                   "--overwrite=True", *(model_flags or MICRO_BATCH)]
                side_by_side.append(Step(name, [command], 300 if compiled else 120,
                                         train_figure(os.path.join(args.out, run_dir, "log.jsonl"))))

    n = 4 if tiny else 40  # float16 with its gradient scaler: N steps straight, against N/2 and a resume to N
    straight, half = (os.path.join(args.out, "runs", name, "log.jsonl") for name in ("resume_straight", "resume_half"))

    def same_losses(outputs):
        a, b = losses(read_log(straight)), losses(read_log(half))
        if a != b:
            return "FAIL", f"resumed losses differ from the straight run's: {b[-1]} against {a[-1]}"
        return "ok", f"{len(a)} evaluations identical, to step {n}"
    fp16 = train + reversal + ["--dtype=float16", f"--eval_interval={n // 4}"]
    side_by_side.append(Step("resume float16", [
        fp16 + [f"--max_iters={n}", "--out_dir=runs/resume_straight"],
        fp16 + [f"--max_iters={n // 2}", "--out_dir=runs/resume_half"],
        train + ["--out_dir=runs/resume_half", "--init_from=resume", f"--max_iters={n}"]], 240, same_losses))

    single, ddp = (os.path.join(args.out, "runs", name, "log.jsonl") for name in ("single", "ddp"))

    def ddp_losses(outputs):
        a, b = np.array(losses(read_log(single))), np.array(losses(read_log(ddp)))
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-6):
            return "FAIL", f"DDP's losses differ from one process's: {b[-1].tolist()} against {a[-1].tolist()}"
        return "ok", f"losses of one plain process (largest difference {np.abs(a - b).max():.1e})"
    plain = reversal + [f"--max_iters={n}", f"--eval_interval={n // 2}"]
    side_by_side.append(Step("ddp torchrun", [
        train + plain + ["--out_dir=runs/single"],
        [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", *train[1:], *plain,
         "--out_dir=runs/ddp"]], 240, ddp_losses))

    # compiled training with gradient accumulation: CUDA graphs can hand a micro-step gradients that the next replay
    # overwrites (train.py uses them without accumulation only); the same step at 1 x 32, eager and compiled, and 4 x 8
    runs = {"eager_1x32": (False, 1), "compiled_1x32": (True, 1), "compiled_4x8": (True, 4)}  # compile, micro-steps
    accumulation = {name: os.path.join(args.out, "runs", name, "log.jsonl") for name in runs}

    def same_steps(outputs):
        return compare_steps({name: read_log(path) for name, path in accumulation.items()}, "eager_1x32")
    step = train + ["--dataset=gpu_check", f"--device={device}", "--overwrite=True", "--variant=encdec",
                    "--embedding_loss=mse", "--n_layer=2", "--n_embed=64", "--n_head=4", "--context_size=64",
                    "--dtype=float32", "--max_iters=4", "--eval_interval=1", "--eval_iters=1"]
    side_by_side.append(Step("accumulation compiled", [
        step + [f"--out_dir=runs/{name}", f"--compile={compiled}", f"--batch_size={32 // micro_steps}",
                f"--gradient_accumulation_steps={micro_steps}"] for name, (compiled, micro_steps) in runs.items()],
        300, same_steps))


    bench = [python, "-m", "lab.bench", f"--device={device}", "--quick"] + (
        ["--configs=cpu", "--threads=1"] if tiny else ["--configs=paper", "--compile"])
    train_json, decode_json = (os.path.join(args.out, f"race_{name}.json") for name in ("train", "decode"))

    def train_race(outputs):
        with open(train_json) as f:
            targets = json.load(f)["train"]["targets"]
        labels = {"vs_hf": ("baseline {{}} HF", "{:.2f}x"), "vs_baseline": ("encdec {{}} ours", "{:.2f}x"),
                  "mfu": ("{} MFU {{}}", "{:.0%}")}
        return target_figure([dict(t, label=labels[t["figure"]][0].format(t["model"].split()[-1]),
                                   format=labels[t["figure"]][1]) for t in targets])

    def decode_race(outputs):
        with open(decode_json) as f:
            rows = {(r["model"], r["batch"]): r for r in json.load(f)["decode"]["rows"]}
        return target_figure([
            dict(label="batch 1: baseline {} HF", value=rows["ours baseline", 1]["vs_hf"], target=5.0,
                 format="{:.1f}x"),
            dict(label="batch 8: encdec {} HF", value=rows["ours encdec", 8]["vs_hf"], target=1.0,
                 format="{:.2f}x")])
    alone = [
        Step("race train", [bench + ["--train_only", f"--json={train_json}"]
                            + ["--batch_size=2", "--step_sequences=4", "--repeats=1"] * tiny], 420, train_race),
        Step("race decode", [bench + ["--decode_only", f"--json={decode_json}", "--decode_repeats=2"]
                             + (["--decode_prompt=4", "--decode_tokens=4"] if tiny else ["--decode_tokens=100"])],
             300, decode_race)]
    return side_by_side, alone


def compare_steps(logs, reference, rtol=1e-2):
    """(ok or FAIL, figure) of runs that took the same optimizer steps in other ways ({name: log records}): the
    gradient norm of each step equals the reference's to rtol (float32; TF32 matmuls and summation order differ), so
    the weights went the same way. A lost micro-step's gradient is off by far more: a quarter of the sum, or all of
    it. (Not the logged losses: an evaluation batch is batch_size sequences, so the 4 x 8 run evaluates others.)"""
    def figures(records):
        return np.array([r["grad_norm"] for r in records[1:]], dtype=float)
    worst = 0.0
    for name, records in logs.items():
        a, b = figures(logs[reference]), figures(records)
        if a.shape != b.shape:
            return "FAIL", f"{name} logged {len(b)} evaluations, {reference} {len(a)}"
        difference = float(np.max(np.abs(b - a) / np.abs(a)))
        if not difference <= rtol:
            return "FAIL", f"{name}'s gradient norms differ from {reference}'s by {difference:.1%}"
        worst = max(worst, difference)
    return "ok", f"{', '.join(n for n in logs if n != reference)} as {reference} (within {worst:.1e})"


def target_figure(targets):
    """(ok or short, e.g. "baseline 1.31x HF, encdec MFU 22% (<25%)") of targets: dicts of a label with {} for the
    value, the value, its target and their format."""
    figures = [t["label"].format(t["format"].format(t["value"]))
               + ("" if t["value"] >= t["target"] else f" (<{t['format'].format(t['target'])})") for t in targets]
    return ("ok" if all(t["value"] >= t["target"] for t in targets) else "short"), ", ".join(figures)


def main():
    on_ctrl_c("the check was stopped before its steps started; run the same command again to check")
    parser = argument_parser(__doc__, "python -m lab.gpu_check")
    parser.add_argument("--out", default="gpu_check", help="folder for its data, runs and each step's output")
    parser.add_argument("--jobs", type=int, default=4, help="steps at a time, before the races (which run alone)")
    parser.add_argument("--only", default="", help="run only the steps whose names match this regular expression")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: cpu
    add_flag(parser, "--tiny", argparse.SUPPRESS)  # tests: the same steps at a few thousand parameters
    parser.add_argument("--fail", default="", help=argparse.SUPPRESS)  # tests: the step that gets a bad flag
    args = parser.parse_args()
    if args.jobs < 1:
        fail(f"jobs={args.jobs} is not allowed; use 1 or more")
    try:
        only = re.compile(args.only)
    except re.error as e:
        fail(f"--only={args.only!r} is not a regular expression ({e}); e.g. --only='race|resume'")
    args.out = os.path.abspath(args.out)
    groups = steps(args, sys.executable)
    side_by_side, alone = ([s for s in group if only.search(s.name)] for group in groups)
    if not side_by_side + alone:
        fail(f"--only={args.only!r} matches none of the steps, which are: "
             f"{', '.join(s.name for group in groups for s in group)}; e.g. --only='race|resume'")
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        fail(f"no CUDA GPU is visible here (torch {torch.__version__}, "
             f"{'a CUDA build' if torch.version.cuda else 'a build without CUDA'}); this check is for a machine with "
             f"one (the tests check the same code on a CPU: python -m pytest tests/test_gpu_check.py)")
    logs = os.path.join(args.out, "logs")
    try:
        os.makedirs(logs, exist_ok=True)
        if not os.access(logs, os.W_OK):  # also a read-only file system, for root too
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as e:
        fail(f"cannot write in --out={args.out} ({logs}: {e.strerror}); give --out a folder you can write to, "
             f"e.g. --out=/tmp/gpu_check")
    if args.tiny:
        write_dataset(os.path.join(args.out, "data", "gpu_check"), 256, "byte", 20_000, 4_000)
    else:
        write_dataset(os.path.join(args.out, "data", "gpu_check"), 50257, "gpt2", 4_000_000, 400_000)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if args.tiny:
        env["OMP_NUM_THREADS"] = "1"
    device = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    n = len(side_by_side) + len(alone)
    print(f"gpu check: {device}, torch {torch.__version__}, {n} step{'s' * (n != 1)} "
          f"({args.jobs} at a time, then the races alone); each step's output in {args.out}/logs/", flush=True)
    print(f"| {'step':32} | {'status':6} | {'figure':60} | {'seconds':>7} |")
    print(f"|{'-' * 34}|{'-' * 8}|{'-' * 62}|{'-' * 9}|", flush=True)
    results, start = [], time.time()

    def run(step):
        status, figure, seconds = step.run(args.out, env, force_failure=step.name == args.fail)
        if STOP.is_set():  # stopped: no row; the line that says so follows
            return
        print(f"| {step.name:32} | {status:6} | {figure:60} | {seconds:>7.0f} |", flush=True)
        results.append(dict(step=step.name, status=status, figure=figure, seconds=round(seconds, 1)))
    pool = ThreadPoolExecutor(args.jobs)
    try:  # not `with`: its exit would wait for the steps before they were told to stop
        list(pool.map(run, side_by_side))
        pool.shutdown()
        for step in alone:
            run(step)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (on_ctrl_c): the steps run in sessions of their own
        stop_steps()
        pool.shutdown(wait=True, cancel_futures=True)
        print(f"interrupted: the check and its running steps were stopped after {len(results)} of {n} steps had "
              f"ended (their rows are above); each step's output so far is in {args.out}/logs/, and no "
              f"summary.json was written; run the same command again to check", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    statuses = [r["status"] for r in results]
    write_atomic(os.path.join(args.out, "summary.json"), json.dumps(dict(device=device, torch=torch.__version__,
                                                                         steps=results), indent=1).encode())
    failed = statuses.count("FAIL")
    print(f"{n} step{'s' * (n != 1)} in {time.time() - start:.0f} s: {statuses.count('ok')} ok, "
          f"{statuses.count('short')} short of a target, {failed} failed; the table in {args.out}/summary.json, the "
          f"races' figures in race_train.json and race_decode.json", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
