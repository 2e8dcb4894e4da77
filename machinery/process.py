"""How a script stops: in one line on bad input (fail), a stop, out of memory, a failed compile."""
import atexit
import contextlib
import os
import signal
import sys

# SIGINT, SIGTERM, SIGHUP, less those ignored where the script started (`nohup`): they stay ignored
STOPS = [stop for stop in (getattr(signal, name, None) for name in ("SIGINT", "SIGTERM", "SIGHUP"))
         if stop and signal.getsignal(stop) != signal.SIG_IGN]


def fail(message):
    """Stop with `error: message` on stderr and exit status 1; the message names the problem and the
    fix."""
    raise SystemExit(f"error: {message}")


def script_start():
    """What every script does first: printing never stops it (a character the console cannot show
    is escaped, a reader gone ends it quietly); SIGTERM and SIGHUP stop it as Ctrl-C does."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not when a test has replaced it
            stream.reconfigure(errors="backslashreplace")

    def drop_output():  # no reader: the rest goes to os.devnull, so the last flush cannot fail
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a test's stand-in for stdout has no file descriptor
            pass

    def flush():
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            drop_output()

    def quiet(kind, value, tb, previous=sys.excepthook):  # no BrokenPipeError traceback
        if issubclass(kind, BrokenPipeError):
            return drop_output()
        return previous(kind, value, tb)

    def stop_once(signum, frame):  # a second stop (a study's runs, then the study) is ignored
        for stop in STOPS:  # not SIG_IGN: a stop on its way would print a warning
            signal.signal(stop, lambda *args: None)
        raise KeyboardInterrupt
    atexit.register(flush)  # before the interpreter's own last flush ("Exception ignored")
    sys.excepthook = quiet
    for stop in STOPS:
        signal.signal(stop, stop_once)


def machine_error(error, lower, compile_off="use --compile=False"):
    """The one line for an error of the machine rather than of the input, None for any other error:
    out of memory (CPU or GPU), naming the settings to lower, or a torch.compile that found no
    working C++ compiler."""
    import re
    detail = str(error).strip() or type(error).__name__
    detail = re.sub(r"\[enforce fail at [^]]*\] (data\. )?", "", detail)
    # e.g. CUDA out of memory. Tried to allocate 2.00 GiB
    detail = ". ".join(detail.splitlines()[0].split(". ")[:2])
    names = [kind.__name__ for kind in type(error).__mro__]
    memory = re.search(r"out of memory|DefaultCPUAllocator|can't allocate memory", detail, re.I)
    if "MemoryError" in names or "OutOfMemoryError" in names or memory:
        return f"out of memory ({detail}); lower {lower}"
    compiler = ("torch._dynamo", "torch._inductor")
    if "BackendCompilerFailed" in names or any(kind.__module__.startswith(compiler)
                                               for kind in type(error).__mro__):
        from machinery.errors import compile_failure
        return compile_failure(error, compile_off)
    return None


def start_training(run):
    """train.py's start: one line saying where the last checkpoint is (run: its globals)."""
    def hook(kind, value, tb):  # a stop, out of memory, no C++ compiler, a DDP peer gone
        from machinery.errors import peer_gone
        error = machine_error(value, "--batch_size (a larger --gradient_accumulation_steps keeps "
                                     "the batch per step) or --context_size")
        setting = " and that setting" if error else ""  # out of memory: lower a setting to go on
        error = error or peer_gone(value)
        if not issubclass(kind, KeyboardInterrupt) and not error:
            return sys.__excepthook__(kind, value, tb)
        saved = run.get("saved_iter")  # write_atomic removes the temporary file of a save cut short
        kept = "no checkpoint was saved yet"
        if saved is not None:
            kept = (f"the last checkpoint is {run['ckpt_path']} (iteration {saved}); "
                    f"continue with `{run['resume_command']}`")
        if error:  # in any process: it may be the only one short of memory
            print(f"error: {error}; {kept}" + setting * (saved is not None), file=sys.stderr)
        elif int(os.environ.get("RANK", 0)) == 0:
            print(f"interrupted at iteration {run.get('iter_num', 0)}: {kept}", file=sys.stderr)
    sys.excepthook = hook
    script_start()
    return StopAfterStep()


class StopAfterStep:
    """From arm, a stop finishes the step (or ends an evaluation at once), then the run saves it and
    ends; a second Ctrl-C ends it at once (torchrun's SIGTERM after a SIGINT changes nothing)."""
    requested = False
    evaluating = None  # the iteration under evaluation

    class EvaluationStopped(BaseException):  # not an Exception: no `except Exception` holds it
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
        # at once, on stdout: the run's one last line follows on stderr
        name = signal.Signals(signum).name
        say = print if int(os.environ.get("RANK", 0)) == 0 else (lambda *args, **kwargs: None)
        if self.evaluating is not None:
            say(f"{name}: ending the evaluation of iteration {self.evaluating} now, then saving a "
                f"checkpoint of that step's weights (a resume evaluates them)", flush=True)
            raise self.EvaluationStopped
        seconds = self.step_seconds()
        # Kubernetes and Slurm send SIGKILL 30 s after SIGTERM, by default
        late = "; if SIGKILL comes first, the last checkpoint saved remains" * (seconds > 20)
        say(f"{name}: finishing this step (about {seconds:.1f} s), then saving a checkpoint{late} "
            f"(a second Ctrl-C ends the run at once)", flush=True)
