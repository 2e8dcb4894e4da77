"""The device and its clock: where a script runs; train.py's estimate, ETA and MFU."""
import math
import os
import re
import time

import torch

from machinery.process import fail


def pick_device(device, dtype="float32", resumed_from=None):
    """The device (auto: cuda, mps, cpu) and dtype (auto: bfloat16, float16 on a pre-A100
    GPU, float32 off a GPU), or one line; resumed_from: the checkpoint that used them."""
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    mps = torch.backends.mps.is_available()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    picked = device if device != "auto" else "cuda" if gpus else "mps" if mps else "cpu"
    where = f"{resumed_from} ran with device={device!r}, dtype={dtype!r}; here " \
        if resumed_from else ""
    if picked.startswith("cuda") and int(picked[5:] or 0) >= gpus:
        fail(f"{where}device={device!r} but " + (f"there are only {gpus} CUDA devices; "
             "use --device=cuda:0" if gpus else "CUDA is not available here; use "
             "--device=auto or --device=cpu"))
    if picked == "mps" and not mps:
        fail(f"{where}device='mps' but MPS (the GPU of Apple silicon) is not available; "
             "use --device=auto or --device=cpu")
    if picked == "mps" and dtype not in ("auto", "float32"):
        fail(f"{where}dtype={dtype!r} on mps is not supported; use --dtype=float32 or auto")
    if dtype == "auto":  # not is_bf16_supported(), which counts a T4's slow emulated bf16
        bf16 = picked.startswith("cuda") and torch.cuda.get_device_capability(picked)[0] >= 8
        dtype = "bfloat16" if bf16 else "float16" if picked.startswith("cuda") else "float32"
    if picked == "cpu" and dtype != "float32":
        print(f"note: {dtype} autocast on the CPU is slow; it is here to test the code "
              "path a GPU takes", flush=True)
    # a thread per free core (OMP_NUM_THREADS=N chooses): one waiting slows each step 50x
    if picked == "cpu" and "OMP_NUM_THREADS" not in os.environ and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        threads = max(1, min(torch.get_num_threads(), round(os.cpu_count() - load)))
        if threads < torch.get_num_threads():  # the losses are the same
            cores = os.cpu_count()
            print(f"note: {threads} thread{'s' * (threads > 1)}, not {torch.get_num_threads()}: "
                  f"the CPU is busy (load {load:.1f} on {cores} cores); OMP_NUM_THREADS=N chooses")
            torch.set_num_threads(threads)
    return picked, dtype


def sync(device):
    """Wait for the queued work, so that a timer measures it (a GPU is asynchronous)."""
    if str(device).startswith(("cuda", "mps")):
        getattr(torch, str(device).split(":")[0]).synchronize()


def matmul_peak(device, dtype, n, repeats, warmup=0, pick=min):
    """FLOP/s of an n x n x n matmul in dtype, the pick (fastest) of the timed repeats."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    times = []
    for _ in range(repeats + warmup):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / pick(times[warmup:])


def duration(seconds):
    """e.g. 350 ms, 45 s, 12 min, 3.2 h, 2.5 days"""
    units = [(1e-3, "ms", 1), (1, "s", 90), (60, "min", 90 * 60), (3600, "h", 48 * 3600)]
    size, unit = next(((s, u) for s, u, below in units if seconds < below), (86400, "days"))
    return f"{seconds / size:.{int(size > 60)}f} {unit}"


def percent(fraction):
    """Two significant digits at least: 45%, 5.2%, 0.031% (a tiny GPU model: not 0.0%)."""
    p = 100 * fraction
    return f"{p:.{max(0, 1 - math.floor(math.log10(p)))}f}%" if p > 0 else "0%"


class Meter:
    """A run's clock: ms per step, tokens/s, ETA, MFU (model FLOPs utilization: the
    model's FLOP/s over a matmul's timed here; float32 on a CPU: no datasheet peak)."""

    def __init__(self, flops_per_token, tokens_per_iter, max_iters, eval_interval, device, dtype):
        self.flops_per_token = flops_per_token  # of this process's share
        self.tokens_per_iter = tokens_per_iter
        self.max_iters = max_iters
        self.eval_interval = eval_interval
        self.device = device
        cpu = device == "cpu"
        self.peak_flops = matmul_peak(device, torch.float32 if cpu else dtype, 4096 >> 2 * cpu, 10)
        self.eval_start = None
        self.step_estimate = 0.0  # estimate() times it on rank 0; a stop elsewhere asks

    def estimate(self, model, batches, autocast, return_logits, eval_iters, source,
                 micro_steps, iter_num):
        """Say how long the run will take, from a timed forward pass (the second of two):
        a training step costs ~3 per micro-batch, an evaluation ~2 per batch."""
        model.eval()
        with torch.no_grad(), autocast:
            for _ in range(2):  # the first warms up
                t0 = time.perf_counter()
                model(*batches.eval("val", 0), return_logits=return_logits)
                sync(self.device)
        forward = time.perf_counter() - t0
        model.train()
        if eval_iters == 0:  # every val token once: the windows of data.split_losses
            windows = (os.path.getsize(os.path.join(source, "val.bin")) // 2 - 1) / batches.block
            eval_iters = math.ceil(math.ceil(windows) / batches.batch_size)
        self.step_estimate = 3 * micro_steps * forward
        self.eval_seconds = 2 * eval_iters * forward
        total = self.eta(iter_num, self.step_estimate)
        print(f"estimated: {duration(self.step_estimate)} per iteration, "
              f"{duration(self.eval_seconds)} per evaluation, {duration(total)} in all", flush=True)
        if self.device == "cpu" and total > 3 * 3600:
            print(f"warning: this run would take about {duration(total)} on this CPU; for a "
                  f"CPU-sized run, try `python train.py config/cpu_baseline.py` (minutes)")

    def restart(self, iter_num):  # after an evaluation, whose time it measures
        if self.eval_start is not None:
            self.eval_seconds = time.time() - self.eval_start
        self.start = self.last_print = time.time()
        self.start_iter = iter_num

    def step_seconds(self, iter_num):  # since the last evaluation, else the estimate
        steps = iter_num - self.start_iter
        return (time.time() - self.start) / steps if steps else self.step_estimate

    def eta(self, iter_num, step_seconds):  # the steps, and the evaluations between
        evals = max(0, self.max_iters // self.eval_interval - (iter_num - 1) // self.eval_interval)
        evals += self.max_iters % self.eval_interval != 0  # and one at max_iters
        return (self.max_iters - iter_num) * step_seconds + evals * self.eval_seconds

    def evaluating(self, iter_num):  # at an evaluation's start: the steps' tokens/s
        sync(self.device)
        if self.eval_seconds > 30:
            print(f"eval {iter_num}: evaluating, about {duration(self.eval_seconds)}", flush=True)
        self.eval_start = time.time()
        if iter_num > self.start_iter:
            return self.tokens_per_iter / self.step_seconds(iter_num)

    def mfu(self, tokens_per_sec):
        return self.flops_per_token * tokens_per_sec / self.peak_flops

    def progress(self, iter_num, due):  # a progress line's speed, due or after a minute
        if not due and time.time() - self.last_print < 60:
            return None
        self.last_print = time.time()
        step_seconds = self.step_seconds(iter_num)
        tokens_per_sec = self.tokens_per_iter / step_seconds
        mfu = self.mfu(tokens_per_sec)
        busy = " (above 100%: the CPU was busy while its peak was timed)" if mfu > 1 else ""
        return (f"{step_seconds * 1000:.0f} ms/iter, {tokens_per_sec:,.0f} tokens/s, mfu "
                f"{percent(mfu)}{busy}, ETA {duration(self.eta(iter_num, step_seconds))}")
