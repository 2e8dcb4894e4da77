"""
Several processes training as one (DDP, by torchrun): every decision to stop taken by all together,
so that none is left waiting for the others.
"""
import math
import os
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from machinery.process import fail

ddp = "RANK" in os.environ  # started by torchrun
device = "cpu"  # this process's device, set by start
flags = None  # with NCCL, a gloo group for yes-or-no questions, answered without waiting for a GPU


def start(device_asked, batch_size, gradient_accumulation_steps):
    """Join the other processes, if torchrun started several: (rank, world_size, this process's
    device: cuda:LOCAL_RANK on GPUs); one line where they cannot share a step's micro-batches."""
    global device, flags
    device = device_asked
    if not ddp:
        return 0, 1, device
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    if gradient_accumulation_steps % dist.get_world_size():
        stop_uneven(batch_size, gradient_accumulation_steps, dist.get_world_size())
    if device.startswith("cuda") and dist.is_gloo_available():
        flags = dist.new_group(backend="gloo")
    if device.startswith("cuda"):
        device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def stop_uneven(batch_size, gradient_accumulation_steps, world_size):
    """Stop with one line where the micro-batches of a step cannot be shared out evenly."""
    # the same step of sequences in smaller micro-batches
    steps = math.lcm(gradient_accumulation_steps, world_size)
    sequences = batch_size * gradient_accumulation_steps
    same_step = ""
    if sequences % steps == 0:
        same_step = (f", e.g. --batch_size={sequences // steps} --gradient_accumulation_steps="
                     f"{steps} (the same {sequences} sequences per step)")
    fail(f"gradient_accumulation_steps={gradient_accumulation_steps} must be divisible by the "
         f"{world_size} processes; change one of them{same_step}")


def wrap(model, device_type):  # under DDP: the gradients averaged over the processes
    if not ddp:
        return model
    device_ids = [int(os.environ["LOCAL_RANK"])] if device_type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def all_sum(value):
    """value summed over the processes (DDP), else value itself: every process sees the same."""
    if not ddp:
        return value
    total = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return total.item()


def any_of(flag):
    """Whether flag is true in any process, asked on the CPU: no wait for the GPU's queued work."""
    if not ddp:
        return flag
    count = torch.tensor([float(flag)], device="cpu" if flags is not None else device)
    dist.all_reduce(count, group=flags)
    return count.item() > 0


@contextmanager
def stop_together():
    """Around the work of rank 0 alone: a stop there (fail, an error) stops every process, rank 0
    with its one line, the others silently (not with "connection closed" tracebacks)."""
    error = None
    try:
        yield
    except (SystemExit, Exception) as e:
        error = e
    if not all_sum(error is not None):
        return
    if ddp:  # rank 0 says why before any process leaves (torchrun ends the others once one has)
        if isinstance(error, SystemExit):
            print(error.code, file=sys.stderr, flush=True)
        elif error is not None:
            sys.excepthook(type(error), error, error.__traceback__)
        dist.barrier()
        raise SystemExit(1)
    raise error


def finish():  # every process waits for the last checkpoint, then all leave together
    if ddp:
        dist.barrier()
        if flags is not None:
            dist.destroy_process_group(flags)
        dist.destroy_process_group()
