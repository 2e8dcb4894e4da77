"""
The one line for an error a normal run never meets, imported only where one occurs: a device this
machine has not got, a failed torch.compile, a DDP step that cannot be shared out, a peer gone.
"""
import math
import os
import re

import torch

from machinery.process import fail


def device_error(device, dtype, resumed_from):
    """pick_device's one line for a device or dtype not allowed, or not on this machine
    (resumed_from: the checkpoint that ran with them)."""
    where = ""  # a resume names the checkpoint that ran with them
    if resumed_from:
        where = f"{resumed_from} ran with device={device!r}, dtype={dtype!r}; here "
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"{where}device={device!r} but CUDA is not available here; use --device=auto or "
             f"--device=cpu")
    if device.startswith("cuda") and int(device[5:] or 0) >= torch.cuda.device_count():
        fail(f"{where}device={device!r} but there are only {torch.cuda.device_count()} CUDA "
             f"devices; use --device=cuda:0")
    if device == "mps" and not torch.backends.mps.is_available():
        fail(f"{where}device='mps' but MPS (the GPU of Apple silicon) is not available here; use "
             f"--device=auto or --device=cpu")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    fail(f"{where}dtype={dtype!r} on mps is not supported here; use --dtype=float32 or "
         f"--dtype=auto")


def compile_failure(error, compile_off="use --compile=False"):
    """The one line for a torch.compile that failed, whatever the torch release and the error's
    class."""
    # BackendCompilerFailed: the backend's own error
    while getattr(error, "inner_exception", None) is not None:
        error = error.inner_exception
    detail = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
    no_compiler = re.search(r"compiler|g\+\+|gcc|\bcc\b|cl\.exe|CalledProcessError", detail, re.I)
    return (f"torch.compile could not build the model ({type(error).__name__}: {detail}); "
            f"{compile_off}" + (", or install a C++ compiler" if no_compiler else ""))


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


def peer_gone(error):
    """The one line for a DDP process whose peer ended (killed, out of memory elsewhere): gloo or
    NCCL then fails every exchange with it; None for any other error, or without DDP."""
    names = [kind.__name__ for kind in type(error).__mro__]
    detail = (str(error).strip() or type(error).__name__).splitlines()[0]
    detail = re.sub(r"\[[^]]*\.cc:\d+\] ", "", detail).split(". ")[0][:160]  # gloo's source line
    lost = re.search(r"Connection (reset|closed) by peer|Broken pipe|peer.*(closed|gone)", detail,
                     re.I)
    if "RANK" not in os.environ or not (lost or "DistBackendError" in names
                                        or "DistNetworkError" in names):
        return None
    return f"another process of this run ended ({type(error).__name__}: {detail})"
