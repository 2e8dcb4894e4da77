"""How a script stops: in one line, not a traceback; train.py after a step; DDP's processes
(torchrun's, training as one) together."""
import atexit
import os
import re
import signal
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist

# SIGINT, SIGTERM, SIGHUP, less those ignored from the start (`nohup`)
STOPS = [s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
         if s and signal.getsignal(s) != signal.SIG_IGN]
MASTER = int(os.environ.get("RANK", 0)) == 0  # rank 0 speaks for a DDP run
ddp = "RANK" in os.environ  # started by torchrun


def fail(message):
    """Exit 1 with `error: message` on stderr, naming the problem and the fix."""
    raise SystemExit(f"error: {message}")


def machine_error(error, lower):
    """The one line for an error of the machine, not the input, else None."""
    kinds = type(error).__mro__
    names = [kind.__name__ for kind in kinds]
    while getattr(error, "inner_exception", None) is not None:  # a compiler's
        error = error.inner_exception
    name = type(error).__name__
    # two sentences, e.g. "CUDA out of memory. Tried to allocate 2.00 GiB"
    detail = ". ".join((str(error).strip() or name).splitlines()[0].split(". ")[:2])
    memory = re.search(r"out of memory|can't allocate memory", detail, re.I)
    if memory or "OutOfMemoryError" in names or "MemoryError" in names:
        return f"out of memory ({detail}); lower {lower}"
    if any(k.__module__.startswith(("torch._dynamo", "torch._inductor")) for k in kinds):
        no_cxx = re.search(r"compiler|g\+\+|gcc|\bcc\b|cl\.exe|CalledProcess", detail)
        fix = "use --compile=False" + ", or install a C++ compiler" * bool(no_cxx)
        return f"torch.compile could not build the model ({name}: {detail[:300]}); {fix}"
    # gloo and NCCL fail each exchange with a peer that ended
    lost = re.search(r"by peer|Broken pipe|peer.*(closed|gone)", detail, re.I)
    if ddp and (lost or "DistError" in names):
        return f"another process of this run ended ({name}: {detail[:160]})"
    return None


class Stop:
    """A stop (Ctrl-C, SIGTERM, SIGHUP) raises KeyboardInterrupt, and the stops after it are
    ignored; once armed (train.py), a first stop only asks the run to finish its step."""
    armed = requested = False
    saved_iter = None  # train.py: the iteration of the checkpoint on disk

    def __call__(self, signum, frame):
        if self.armed and not (self.requested and signum == signal.SIGINT):
            # on stdout, at once (the last line comes on stderr); a second: nothing
            if MASTER and not self.requested:
                print(f"{signal.Signals(signum).name}: finishing this step, then ending the run "
                      "(a second Ctrl-C ends it at once)", flush=True)
            self.requested = True
            return
        for stop in STOPS:
            # not SIG_IGN: a stop on its way would print a warning
            signal.signal(stop, lambda *args: None)
        raise KeyboardInterrupt


def on_ctrl_c(kept, lower="the sizes asked for"):
    """One line, with kept, for a stop or a machine error; returns the Stop."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not when a test has replaced it
            stream.reconfigure(errors="backslashreplace")

    def flush():  # before the interpreter's, which would print "Exception ignored"
        try:
            sys.stdout.flush()
        except BrokenPipeError:  # no reader: what is left goes to os.devnull
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def hook(kind, value, tb):
        if issubclass(kind, BrokenPipeError):  # no reader: quiet
            return
        line = machine_error(value, lower)
        if line is None and not issubclass(kind, KeyboardInterrupt):
            return sys.__excepthook__(kind, value, tb)
        said = kept() if callable(kept) else kept
        if line is not None:  # in any process: maybe the only one out of memory
            return print(f"error: {line}; {said}", file=sys.stderr, flush=True)
        if MASTER:
            print(f"interrupted: {said}", file=sys.stderr, flush=True)
        if ddp:  # torchrun's hook then prints this one's line
            return
        atexit._run_exitfuncs()  # the folders' locks let go, output flushed
        os._exit(130)  # and no second stop in the interpreter's shutdown
    atexit.register(flush)
    stop = Stop()
    for signum in STOPS:
        signal.signal(signum, stop)
    sys.excepthook = hook
    return stop


def all_sum(value):  # over the processes, else value
    if not ddp:
        return value
    on = "cuda" if dist.get_backend() == "nccl" else "cpu"  # NCCL: this process's GPU
    total = torch.tensor([value], dtype=torch.double, device=on)
    dist.all_reduce(total)
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
