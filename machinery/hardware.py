"""The device: where a script runs, in what precision; how fast it multiplies matrices."""
import os
import re
import time

import torch

from machinery.process import fail


def pick_device(device, dtype="float32"):
    """The device (auto: cuda, mps, cpu) and dtype (auto: bfloat16, float16 before the A100,
    float32 off a GPU), or one line."""
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    mps = torch.backends.mps.is_available()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    picked = device if device != "auto" else "cuda" if gpus else "mps" if mps else "cpu"
    present = {"cpu": True, "mps": mps, "cuda": int(picked[5:] or 0) < gpus}
    if not present[picked.split(":")[0]]:
        fail(f"device={picked!r} is not available here ({gpus} CUDA devices, "
             f"{'' if mps else 'no '}MPS); use --device=auto or --device=cpu")
    if picked == "mps" and dtype not in ("auto", "float32"):
        fail(f"dtype={dtype!r} on mps is not supported; use --dtype=float32 or auto")
    if dtype == "auto":  # not is_bf16_supported(): it counts a T4's slow emulated bf16
        bf16 = picked.startswith("cuda") and torch.cuda.get_device_capability(picked)[0] >= 8
        dtype = "bfloat16" if bf16 else "float16" if picked.startswith("cuda") else "float32"
    # a thread per free core (or OMP_NUM_THREADS): one waiting slows each step 50x
    if picked == "cpu" and "OMP_NUM_THREADS" not in os.environ and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        threads = max(1, min(torch.get_num_threads(), round(os.cpu_count() - load)))
        if threads < torch.get_num_threads():  # the losses are the same
            print(f"note: using {threads} of {torch.get_num_threads()} threads: the CPU is "
                  f"busy (load {load:.1f}); OMP_NUM_THREADS=N chooses")
            torch.set_num_threads(threads)
    return picked, dtype


def sync(device):
    """Wait for the queued (asynchronous) work, so that a timer measures it."""
    if str(device).startswith(("cuda", "mps")):
        getattr(torch, str(device).split(":")[0]).synchronize()


def matmul_peak(device, dtype, n, repeats, warmup=0, pick=min):
    """FLOP/s of an n x n x n matmul in dtype: the pick (fastest) of the repeats."""
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
