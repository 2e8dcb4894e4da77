"""How a script stops: in one line on bad input (fail), a stop signal, out of memory, a
failed torch.compile or lost DDP peer, not a traceback; train.py stops after a step."""
import atexit
import contextlib
import os
import re
import signal
import sys

# SIGINT, SIGTERM, SIGHUP, less those ignored at the start (`nohup`): they stay ignored
STOPS = [stop for stop in (getattr(signal, name, None) for name in ("SIGINT", "SIGTERM", "SIGHUP"))
         if stop and signal.getsignal(stop) != signal.SIG_IGN]
MASTER = int(os.environ.get("RANK", 0)) == 0  # rank 0 speaks for a DDP run


def fail(message):
    """Exit 1 with `error: message` on stderr; message names the problem and the fix."""
    raise SystemExit(f"error: {message}")


def machine_error(error, lower):
    """The one line for an error of the machine, not the input, else None: out of memory
    (naming the settings to lower), a failed torch.compile, a DDP peer that ended."""
    kinds = type(error).__mro__
    while getattr(error, "inner_exception", None) is not None:  # a compiler's, inside
        error = error.inner_exception
    detail = str(error).strip() or type(error).__name__
    detail = re.sub(r"\[enforce fail at [^]]*\] (data\. )?", "", detail)
    # e.g. CUDA out of memory. Tried to allocate 2.00 GiB
    detail = ". ".join(detail.splitlines()[0].split(". ")[:2])
    names = [kind.__name__ for kind in kinds]
    if ("MemoryError" in names or "OutOfMemoryError" in names
            or re.search(r"out of memory|DefaultCPUAllocator|can't allocate memory", detail, re.I)):
        return f"out of memory ({detail}); lower {lower}"
    if "BackendCompilerFailed" in names or any(
            kind.__module__.startswith(("torch._dynamo", "torch._inductor")) for kind in kinds):
        no_compiler = re.search(r"compiler|g\+\+|gcc|\bcc\b|cl\.exe|CalledProcessError", detail)
        return (f"torch.compile could not build the model ({type(error).__name__}: "
                f"{detail[:300]}); use --compile=False"
                + ", or install a C++ compiler" * bool(no_compiler))
    # gloo and NCCL fail each exchange with a peer that ended (killed, out of memory)
    lost = re.search(r"Connection (reset|closed) by peer|Broken pipe|peer.*(closed|gone)",
                     detail, re.I)
    if "RANK" in os.environ and (lost or {"DistBackendError", "DistNetworkError"} & {*names}):
        detail = re.sub(r"\[[^]]*\.cc:\d+\] ", "", detail).split(". ")[0][:160]
        return f"another process of this run ended ({type(error).__name__}: {detail})"
    return None


def drop_output():
    """No reader (closed pipe): output goes to os.devnull; the last flush cannot fail."""
    with contextlib.suppress(OSError, ValueError):  # a test's stdout has no descriptor
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def script_start():
    """Printing never stops a script (a character the console cannot show is escaped, a
    reader gone ends it quietly); SIGTERM and SIGHUP stop it as Ctrl-C does, once."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not when a test has replaced it
            stream.reconfigure(errors="backslashreplace")

    def flush():  # before the interpreter's last flush, which prints "Exception ignored"
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            drop_output()

    def stop_once(signum, frame):  # a second stop (a study's runs, then it) is ignored
        for stop in STOPS:  # not SIG_IGN: a stop on its way would print a warning
            signal.signal(stop, lambda *args: None)
        raise KeyboardInterrupt
    atexit.register(flush)
    for stop in STOPS:
        signal.signal(stop, stop_once)


def on_ctrl_c(kept, lower="the sizes asked for"):
    """From here a stop (Ctrl-C, SIGTERM, SIGHUP) ends the script with one line
    `interrupted: kept` (kept: what is kept and how to go on, or a function saying it) and
    exit status 130; a machine error (machine_error) with `error: ...; kept`, status 1."""
    script_start()

    def hook(kind, value, tb):
        if issubclass(kind, BrokenPipeError):  # no reader: quiet
            return drop_output()
        line = machine_error(value, lower)
        if line is None and not issubclass(kind, KeyboardInterrupt):
            return sys.__excepthook__(kind, value, tb)
        said = kept() if callable(kept) else kept
        if line is not None:  # in any process: it may be the only one short of memory
            return print(f"error: {line}; {said}", file=sys.stderr, flush=True)  # exit 1
        if MASTER:
            print(f"interrupted: {said}", file=sys.stderr, flush=True)
        if "RANK" in os.environ:  # torchrun's hook prints this one's line once it returns
            return
        atexit._run_exitfuncs()  # the folders' locks and notes are let go, output flushed
        os._exit(130)  # and no second stop in the interpreter's shutdown
    sys.excepthook = hook


class StopAfterStep:
    """From arm, a stop finishes the step (an evaluation: at once), the run saves it and
    ends; another Ctrl-C ends it now (torchrun's SIGTERM after SIGINT changes nothing)."""
    requested = False
    evaluating = None  # the iteration under evaluation
    saved_iter = None  # the iteration of the checkpoint on disk, for the run's last line

    class EvaluationStopped(BaseException):  # no `except Exception` holds it
        pass

    def arm(self, step_seconds):  # step_seconds(): how long a step takes
        self.step_seconds = step_seconds
        for stop in STOPS:
            signal.signal(stop, self.stop)

    @contextlib.contextmanager
    def evaluation(self, iter_num):  # around an evaluation, which a stop ends at once
        self.evaluating = iter_num
        with contextlib.suppress(self.EvaluationStopped):
            yield
        self.evaluating = None

    def stop(self, signum, frame):
        if self.requested and signum == signal.SIGINT:  # a second Ctrl-C: at once
            raise KeyboardInterrupt
        if self.requested:
            return
        self.requested = True
        name = signal.Signals(signum).name
        # at once, on stdout: the run's one last line follows on stderr
        say = print if MASTER else (lambda *args, **kwargs: None)
        if self.evaluating is not None:
            say(f"{name}: ending the evaluation of iteration {self.evaluating} now, then "
                "saving a checkpoint of that step's weights (a resume evaluates them)", flush=True)
            raise self.EvaluationStopped
        seconds = self.step_seconds()
        # Kubernetes and Slurm send SIGKILL 30 s after SIGTERM, by default
        late = "; if SIGKILL comes first, the last checkpoint saved remains" * (seconds > 20)
        say(f"{name}: finishing this step (about {seconds:.1f} s), then saving a "
            f"checkpoint{late} (a second Ctrl-C ends the run at once)", flush=True)
