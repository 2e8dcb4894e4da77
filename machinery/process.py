"""
How a script stops: on bad input with one line `error: ...` naming the problem and the fix (fail);
on Ctrl-C, SIGTERM, SIGHUP, out of memory or a failed torch.compile with one line too.
"""
import atexit
import contextlib
import os
import re
import signal
import sys


def fail(message):
    """Stop with `error: message` on stderr and exit status 1; the message names the problem and the
    fix."""
    raise SystemExit(f"error: {message}")


def stop_signals():
    """SIGINT, SIGTERM, SIGHUP (none on Windows), less those ignored where the script started
    (`nohup` ignores SIGHUP, a script's background job SIGINT): they stay ignored."""
    stops = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
             if hasattr(signal, name)]
    return [stop for stop in stops if signal.getsignal(stop) != signal.SIG_IGN]


def script_start():
    """What every script does first. Printing never stops it: a character the console cannot show
    is written escaped, and a reader that stops early (`| head`) ends it quietly. SIGTERM and
    SIGHUP (Colab, docker, Kubernetes; a closed terminal) stop it as Ctrl-C does."""
    end_quietly_without_reader()
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not when a test has replaced it
            stream.reconfigure(errors="backslashreplace")

    def stop_once(signum, frame):  # a second stop (a study's runs, then the study) is ignored
        for stop in stop_signals():  # not SIG_IGN: a stop on its way would print a warning
            signal.signal(stop, lambda *args: None)
        raise KeyboardInterrupt
    for stop in stop_signals():
        signal.signal(stop, stop_once)


def end_quietly_without_reader():
    """Output piped into a reader that stops early (`python train.py -h | head -3`) ends the script
    quietly, with no BrokenPipeError traceback."""
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

    def hook(kind, value, tb, previous=sys.excepthook):
        if issubclass(kind, BrokenPipeError):
            return drop_output()
        return previous(kind, value, tb)
    # before the interpreter's own last flush, which would print "Exception ignored"
    atexit.register(flush)
    sys.excepthook = hook


def machine_error(error, lower, compile_off="use --compile=False"):
    """The one line for an error of the machine rather than of the input, None for any other error:
    out of memory (CPU or GPU), naming the settings to lower, or a torch.compile that found no
    working C++ compiler."""
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
        return compile_failure(error, compile_off)
    return None


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


def on_ctrl_c(message, lower="the sizes asked for", compile_off="use --compile=False"):
    """Make Ctrl-C, SIGTERM and SIGHUP stop the script with one line, `interrupted: message` (what
    is kept, how to go on), and exit status 130, instead of a traceback; running out of memory
    (lower: the settings to lower) or a failed torch.compile, with one line `error: ...`. Also
    script_start's printing that never fails."""
    script_start()

    def hook(kind, value, tb, previous=sys.excepthook):
        line = machine_error(value, lower, compile_off)
        if line:
            return print(f"error: {line}", file=sys.stderr, flush=True)  # exit status 1
        if not issubclass(kind, KeyboardInterrupt):
            return previous(kind, value, tb)  # script_start's: a reader gone is quiet
        print(f"interrupted: {message}", file=sys.stderr, flush=True)
        os._exit(130)
    sys.excepthook = hook


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


def train_stop_hook(run):
    """train.py's excepthook: a stop, out of memory, torch.compile without a compiler, a DDP process
    whose peer ended: one line saying where the last checkpoint is. run: train.py's globals."""
    def hook(kind, value, tb):
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
    return hook


def start_training(run):
    """train.py's start: train_stop_hook, script_start; the StopAfterStep its loop arms."""
    sys.excepthook = train_stop_hook(run)
    script_start()
    return StopAfterStep()


class EvaluationStopped(BaseException):  # not an Exception: no `except Exception` holds it
    pass


class StopAfterStep:
    """In train.py's loop (from arm), a stop lets the step in progress finish, or ends an evaluation
    at once; the run then saves its step and ends (`requested`). A second Ctrl-C ends it at once;
    another signal changes nothing (torchrun sends SIGTERM after the terminal's SIGINT)."""

    def __init__(self):
        self.requested = False
        self.evaluating = None  # the iteration under evaluation

    def arm(self, step_seconds):  # step_seconds(): how long a step takes
        self.step_seconds = step_seconds
        for stop in stop_signals():
            signal.signal(stop, self.stop)

    @contextlib.contextmanager
    def evaluation(self, iter_num):  # around an evaluation, which a stop ends at once
        self.evaluating = iter_num
        try:
            yield
        except EvaluationStopped:
            pass
        finally:
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
            raise EvaluationStopped
        seconds = self.step_seconds()
        # Kubernetes and Slurm send SIGKILL 30 s after SIGTERM, by default
        late = "; if SIGKILL comes first, the last checkpoint saved remains" * (seconds > 20)
        say(f"{name}: finishing this step (about {seconds:.1f} s), then saving a checkpoint{late} "
            f"(a second Ctrl-C ends the run at once)", flush=True)
