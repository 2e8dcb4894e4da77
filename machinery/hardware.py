"""
The device and its clock: which device and precision a script runs in (pick_device), how many CPU
threads (pick_threads), a model compiled and checked before a run trusts it, and the timing behind
train.py's ETA and MFU (Meter).
"""
import math
import os
import re
import statistics
import sys
import time

import torch

from machinery.process import compile_failure, fail, machine_error


def pick_device(device, dtype="float32", resumed_from=None):
    """pick_device_here; resumed_from: the checkpoint whose device and dtype these are, named in the
    error where this machine has not got them."""
    try:
        return pick_device_here(device, dtype)
    except SystemExit as e:
        if resumed_from is None:
            raise
        fail(f"{resumed_from} ran with device={device!r}, dtype={dtype!r}; here "
             f"{str(e.code).removeprefix('error: ')}")


def pick_device_here(device, dtype="float32"):
    """The device and precision every script runs in, checked in this one place. device: auto (cuda,
    then mps, then cpu), cpu, cuda, cuda:N or mps; dtype: auto (bfloat16 on a GPU that has it,
    float16 on an older one, float32 elsewhere), float32, bfloat16 or float16. Returns (device,
    dtype); one line `error: ...` where impossible."""
    has_mps = torch.backends.mps.is_available()
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"device={device!r} but CUDA is not available here; use --device=auto or --device=cpu")
    if device.startswith("cuda") and int(device[5:] or 0) >= torch.cuda.device_count():
        fail(f"device={device!r} but there are only {torch.cuda.device_count()} CUDA devices; "
             f"use --device=cuda:0")
    if device == "mps" and not has_mps:
        fail("device='mps' but MPS (the GPU of Apple silicon) is not available here; "
             "use --device=auto or --device=cpu")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    # not torch.cuda.is_bf16_supported(): it counts the slow emulated bf16 of a T4 or V100
    if dtype == "auto" and not device.startswith("cuda"):
        dtype = "float32"
    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.get_device_capability(device)[0] >= 8 else "float16"
    if device == "mps" and dtype != "float32":
        fail(f"dtype={dtype!r} on mps is not supported here; use --dtype=float32 or --dtype=auto")
    if device == "cpu" and dtype != "float32":
        print(f"note: {dtype} autocast on the CPU is slow; it is here to test the code path a GPU "
              f"takes", flush=True)
    return device, dtype


def compile_model(raw_model, cuda_graphs, batch, autocast, return_logits, all_sum, master):
    """torch.compile(raw_model), tried on one step before the run trusts it; raw_model itself, with
    one line, where this torch release cannot compile it (in any process: all go on uncompiled).
    cuda_graphs: "reduce-overhead", each step replayed as CUDA graphs, one launch instead of
    hundreds; only on one GPU without gradient accumulation, since a replay writes its gradients
    into the buffers of the last one, which .grad may still hold, so a sum over micro-steps can
    lose terms silently (PyTorch issue 96693) or stop with an error (169545)."""
    model = torch.compile(raw_model, mode="reduce-overhead" if cuda_graphs else None)
    error = compile_error(model, raw_model, *batch, autocast, return_logits)
    if not all_sum(error is not None):
        return model
    if master and error:
        print("warning: " + compile_failure(error, "training without it (--compile=False skips "
                                                   "the attempt)"), file=sys.stderr, flush=True)
    elif master:
        print("warning: torch.compile failed in another process; training without it",
              file=sys.stderr, flush=True)
    return raw_model


def compile_error(compiled, raw_model, x, y, autocast, return_logits):
    """One training step's forward and backward (twice: CUDA graphs record on the second) and one
    evaluation pass of the compiled model, before a run starts: the error where this torch release
    cannot compile it, else None."""
    try:
        # without DDP's wrapper (no gradient exchange): DDP compiles its own graphs
        for _ in range(2):
            with autocast:
                loss = compiled(x, y, return_logits=return_logits)[1]
            loss.backward()
        with torch.no_grad(), autocast:
            compiled.eval()(x, y, return_logits=return_logits)
        error = None
    except Exception as e:  # a compiler's error can be of any class
        if (machine_error(e, "") or "").startswith("out of memory"):
            raise
        error = e
    compiled.train()
    raw_model.zero_grad(set_to_none=True)
    return error

# -----------------------------------------------------------------------------
# the device's clock: waiting for its queued work, timing a forward pass, its matmul peak


def sync(device):
    """Wait for the device's queued work, so that a timer measures it (a GPU runs asynchronously).
    """
    if str(device).startswith(("cuda", "mps")):
        getattr(torch, str(device).split(":")[0]).synchronize()


def matmul_peak(device, dtype, n, repeats, warmup=2, pick=statistics.median):
    """FLOP/s of an n x n x n matmul in dtype: the peak that MFU is measured against (here the
    median of the timed repeats; train.py takes the fastest of 10 with no warm-up, since a CPU
    has no datasheet peak)."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    times = []
    for _ in range(repeats + warmup):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / pick(times[warmup:])


def forward_seconds(model, x, y, autocast, return_logits):
    """Seconds of one evaluation forward pass (the faster of two: the first warms up); a training
    step costs ~3."""
    was_training = model.training
    seconds = []
    model.eval()
    with torch.no_grad():
        for _ in range(2):
            t0 = time.perf_counter()
            with autocast:
                model(x, y, return_logits=return_logits)
            sync(x.device)
            seconds.append(time.perf_counter() - t0)
    model.train(was_training)
    return min(seconds)


def duration(seconds):
    """e.g. 350 ms, 45 s, 12 min, 3.2 h, 2.5 days"""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.1f} days"


def percent(fraction):
    """At least two significant digits: 45%, 5.2%, 0.031% (a tiny model on a GPU is not 0.0%)."""
    p = 100 * fraction
    return f"{p:.{max(0, 1 - math.floor(math.log10(p)))}f}%" if p > 0 else "0%"


class Meter:
    """A run's clock: tokens per second since the last evaluation, the ETA, and the model FLOPs
    utilization (MFU), the model's FLOP/s over the peak of large matmuls timed here (the fastest
    of 10, in the run's dtype; float32's on a CPU, where autocast only tests the GPU's code
    path), since a CPU has no datasheet peak."""

    def __init__(self, flops_per_token, tokens_per_iter, max_iters, eval_interval, device, dtype,
                 world_size):
        self.flops_per_token = flops_per_token
        self.tokens_per_iter = tokens_per_iter
        self.max_iters = max_iters
        self.eval_interval = eval_interval
        self.device = device
        self.world_size = world_size
        cpu = device.startswith("cpu")
        self.peak_flops = matmul_peak(device, torch.float32 if cpu else dtype,
                                      1024 if not device.startswith("cuda") else 4096, 10,
                                      warmup=0, pick=min)
        # a GPU's peak, timed on large matmuls, is not disturbed by other work
        self.peak_timed_again = not cpu
        self.eval_seconds = 0.0
        self.iter_seconds = 0.0  # estimated by estimate(), on rank 0
        self.restart()

    def restart(self):
        """A new interval of training, after an evaluation."""
        self.start = time.time()
        self.last_print = self.start
        self.tokens = 0

    def tokens_per_sec(self):
        """Tokens per second since the last evaluation; None before the first step."""
        return self.tokens / (time.time() - self.start) if self.tokens else None

    def mfu(self, tokens_per_sec):
        """The model's FLOP/s over peak_flops. A CPU busy with other work while its peak was timed
        gives too low a peak: an MFU above 100% times it again, once (the progress line says so
        if it stays above)."""
        flops = self.flops_per_token * tokens_per_sec / self.world_size
        if flops > self.peak_flops and not self.peak_timed_again:
            self.peak_timed_again = True
            again = matmul_peak(self.device, torch.float32, 1024, 10, warmup=0, pick=min)
            self.peak_flops = max(self.peak_flops, again)
        return flops / self.peak_flops

    def evals_left(self, it):
        """Evaluations from iteration `it` to the end: every eval_interval, and at max_iters."""
        every = max(0, self.max_iters // self.eval_interval - (it - 1) // self.eval_interval)
        return every + (self.max_iters % self.eval_interval != 0)

    def estimate(self, model, batches, autocast, return_logits, eval_iters, source, micro_steps,
                 iter_num, resumed):
        """Say how long the run will take, from one timed forward pass (a training step costs ~3
        per micro-batch, an evaluation ~2 per batch), and warn before a slow one."""
        forward = forward_seconds(model, *batches.eval("val", 0), autocast, return_logits)
        eval_batches = eval_iters
        if eval_iters == 0:  # every val token once (the windows of evaluate.py)
            val_tokens = os.path.getsize(os.path.join(source, "val.bin")) // 2
            windows = math.ceil((val_tokens - 1) / batches.block)
            eval_batches = math.ceil(windows / batches.batch_size)
        self.iter_seconds = 3 * micro_steps * forward
        self.eval_seconds = 2 * eval_batches * forward
        self.first_iter = iter_num
        total = ((self.max_iters - iter_num) * self.iter_seconds
                 + self.evals_left(iter_num + resumed) * self.eval_seconds)
        print(f"estimated: {duration(self.iter_seconds)} per iteration, "
              f"{duration(self.eval_seconds)} per evaluation, {duration(total)} in all", flush=True)
        warn_if_slow(total, model.lm_head.weight.device.type)

    def step_seconds(self):
        """Seconds a step takes: measured since the last evaluation, else the estimate."""
        if self.tokens:
            return (time.time() - self.start) / (self.tokens / self.tokens_per_iter)
        return self.iter_seconds

    def evaluation_starts(self, iter_num):
        """Before an evaluation: the speed of the interval it ends; a long one says so first."""
        sync(self.device)
        self.interval_speed = self.tokens_per_sec()
        if self.eval_seconds > 30:
            print(f"eval {iter_num}: evaluating, about {duration(self.eval_seconds)}", flush=True)
        self.eval_start = time.time()

    def evaluation_ends(self):
        self.eval_seconds = time.time() - self.eval_start

    def due(self, iter_num):
        """Whether a progress line is due for time's sake (one a minute at least). After the run's
        third step, the estimate is timed again, and said again where it was off by 2x or more."""
        if iter_num == self.first_iter + 3 and self.tokens:
            took = self.step_seconds()
            if not 0.5 < took / self.iter_seconds < 2:
                total = ((self.max_iters - iter_num) * took
                         + self.evals_left(iter_num) * self.eval_seconds * took / self.iter_seconds)
                print(f"re-estimated: {duration(took)} per iteration, {duration(total)} to go "
                      f"(timed on its first iterations; the estimate was "
                      f"{duration(self.iter_seconds)})", flush=True)
        return time.time() - self.last_print > 60

    def progress(self, iter_num):
        """The speed part of a progress line: ms per iteration, tokens/s, MFU and ETA."""
        self.last_print = time.time()
        iter_seconds = self.step_seconds()  # since the last evaluation
        tokens_per_sec = self.tokens_per_iter / iter_seconds
        utilization = self.mfu(tokens_per_sec)
        busy = " (above 100%: the CPU was busy while its peak was timed)" if utilization > 1 else ""
        eta = ((self.max_iters - iter_num) * iter_seconds
               + self.evals_left(iter_num) * self.eval_seconds)
        return (f"{iter_seconds * 1000:.0f} ms/iter, {tokens_per_sec:,.0f} tokens/s, "
                f"mfu {percent(utilization)}{busy}, ETA {duration(eta)}")


def warn_if_slow(total, device_type):
    """Warnings before a run that will be slow: a busy CPU, or a run of hours on a CPU."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0  # Windows has no load average
    if device_type == "cpu" and load > os.cpu_count() - 0.5 and torch.get_num_threads() > 1:
        print(f"warning: the CPU is busy (load {load:.1f} on {os.cpu_count()} cores), and this "
              f"run's {torch.get_num_threads()} threads will wait on the others: run several at "
              f"once with OMP_NUM_THREADS=1 each, as study.py does", flush=True)
    if device_type == "cpu" and total > 3 * 3600:
        print(f"warning: this run would take about {duration(total)} on this CPU; for a CPU-sized "
              f"run, try `python train.py config/cpu_baseline.py` (minutes)", flush=True)


def pick_threads(device):
    """On a CPU, as many threads as it has cores free (at least one), unless OMP_NUM_THREADS says:
    a thread that waits for a core another program holds makes every step wait (a run of 2 threads
    on a 2-core machine kept busy took 50x as long as one of 1). The losses are the same."""
    if not device.startswith("cpu") or "OMP_NUM_THREADS" in os.environ:
        return
    if not hasattr(os, "getloadavg"):  # Windows has no load average
        return
    load = os.getloadavg()[0]
    threads = max(1, min(torch.get_num_threads(), round(os.cpu_count() - load)))
    if threads < torch.get_num_threads():
        s = "s" * (threads > 1)
        print(f"note: {threads} thread{s}, not {torch.get_num_threads()}: the CPU is busy (load "
              f"{load:.1f} on {os.cpu_count()} cores); OMP_NUM_THREADS=N chooses", flush=True)
        torch.set_num_threads(threads)
