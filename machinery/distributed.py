"""Processes training as one (DDP, by torchrun); a stop of one stops all."""
import math
import os
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist

from machinery.process import fail

ddp = "RANK" in os.environ  # started by torchrun
device = "cpu"  # this process's device, set by start
flags = None  # with NCCL, a gloo group for yes-or-no questions: no GPU waits


def start(device_asked, gradient_accumulation_steps):  # rank, world, device
    global device, flags
    device = device_asked
    if not ddp:
        return 0, 1, device
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    world_size = dist.get_world_size()
    if gradient_accumulation_steps % world_size:  # a step's micro-batches, shared
        fit = math.lcm(gradient_accumulation_steps, world_size)
        fail(f"--gradient_accumulation_steps must be a multiple of the {world_size} "
             f"processes: {gradient_accumulation_steps} is not; use e.g. {fit}")
    if device.startswith("cuda"):
        flags = dist.new_group(backend="gloo") if dist.is_gloo_available() else None
        device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(device)
    return dist.get_rank(), world_size, device


def all_sum(value):  # over the processes (on a CPU, with flags), else value
    if not ddp:
        return value
    where = "cpu" if flags is not None else device
    total = torch.tensor([value], dtype=torch.double, device=where)
    dist.all_reduce(total, group=flags)
    return total.item()


@contextmanager
def stop_together():
    """Around rank 0's own work: its stop stops every process, with one line."""
    error = None
    try:
        yield
    except (SystemExit, Exception) as e:
        if not ddp:
            raise
        error = e
    if ddp and all_sum(error is not None):
        if isinstance(error, SystemExit):  # torchrun ends the others once one left
            print(error.code, file=sys.stderr, flush=True)
        elif error is not None:
            sys.excepthook(type(error), error, error.__traceback__)
        dist.barrier()
        raise SystemExit(1)


def finish():  # every process waits for the last checkpoint, then all leave together
    if ddp:
        dist.barrier()
        dist.destroy_process_group()  # and the flags group
