"""
How the scripts take their settings, nanoGPT style: plain globals with defaults, then config files (Python
assignments such as `n_layer = 4`), then `--key=value` arguments; later ones win. Also `--help`, "did you mean"
for a mistyped key, and `fail`, the one way a script stops on bad input: one line, never a traceback.

    defaults = {...: the script's settings}
    user_set = configure(globals(), defaults, sys.argv[1:], ModelConfig)
    parser = argument_parser(__doc__, "python sample.py")  # the other scripts: argparse, with the same grammar
    add_flag(parser, "--compile", "torch.compile the model")  # --compile, --compile=True, --compile false
    read_config("config/cpu_baseline.py")   # {name: value}, for any script that reads a config file
    device, dtype = pick_device("auto", "auto")  # ("cuda", "bfloat16") on an A100, ("cpu", "float32") on a laptop

One grammar for every script: --key=value or --key value; a boolean as a bare --flag (True) or --flag=True/False in
any case.
"""
import argparse
import ast
import atexit
import dataclasses
import difflib
import inspect
import os
import re
import signal
import statistics
import sys
import time
import traceback
import typing

# names from nanoGPT and Hugging Face configs, and what the same setting is called here
ALIASES = {
    "block_size": "context_size", "n_ctx": "context_size", "n_positions": "context_size",
    "max_position_embeddings": "context_size", "seq_len": "context_size",
    "n_embd": "n_embed", "hidden_size": "n_embed", "d_model": "n_embed",
    "n_layers": "n_layer", "num_layers": "n_layer", "num_hidden_layers": "n_layer",
    "n_heads": "n_head", "num_heads": "n_head", "num_attention_heads": "n_head",
    "attn_pdrop": "dropout", "resid_pdrop": "dropout", "embd_pdrop": "dropout", "hidden_dropout_prob": "dropout",
    "lr": "learning_rate", "min_learning_rate": "min_lr", "max_steps": "max_iters", "warmup_steps": "warmup_iters",
    "lr_decay_steps": "lr_decay_iters", "max_grad_norm": "grad_clip", "adam_beta1": "beta1", "adam_beta2": "beta2",
    "eval_steps": "eval_interval", "logging_steps": "log_interval", "output_dir": "out_dir",
    "per_device_train_batch_size": "batch_size", "micro_batch_size": "batch_size",
}


def fail(message):
    """Stop with `error: message` on stderr and exit status 1; the message names the problem and the fix."""
    raise SystemExit(f"error: {message}")


def script_start():
    """What every script does first. Printing never stops it: a character the console cannot show (a Windows code
    page, PYTHONIOENCODING=ascii, a file name that is not UTF-8) is written escaped, and a reader that stops early
    (`| head`) ends it quietly. And SIGTERM and SIGHUP (how Colab, clusters, docker and Kubernetes stop a program; a
    closed terminal) stop it as Ctrl-C does, saying what is kept; a signal ignored where it started (`nohup` ignores
    SIGHUP, a script's background job SIGINT) stays ignored."""
    end_quietly_without_reader()
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # not when a test has replaced it
            stream.reconfigure(errors="backslashreplace")
    stops = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")  # Windows has no SIGHUP
             if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) != signal.SIG_IGN]

    def stop_once(signum, frame):  # a second stop (Ctrl-C reaches a study's runs, then the study's own) is ignored
        for stop in stops:
            signal.signal(stop, lambda *args: None)  # not SIG_IGN: a stop already on its way would print a warning
        raise KeyboardInterrupt
    for stop in stops:
        signal.signal(stop, stop_once)


def end_quietly_without_reader():
    """Output piped into a reader that stops early (`python train.py -h | head -3`) ends the script quietly: exit
    status 1 where a write found the reader gone (the script stops there), the script's own where only the last
    buffered output was left unread; no BrokenPipeError traceback either way."""
    def drop_output():  # no reader: the rest of the output goes to os.devnull, so the last flush cannot fail
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
        return drop_output() if issubclass(kind, BrokenPipeError) else previous(kind, value, tb)
    atexit.register(flush)  # runs before the interpreter's own last flush, which would print "Exception ignored"
    sys.excepthook = hook


def machine_error(error, lower, compile_off="use --compile=False"):
    """The one line for an error of the machine rather than of the input, None for any other error: out of memory
    (CPU or GPU), naming the settings to lower, or a torch.compile that found no working C++ compiler."""
    detail = re.sub(r"\[enforce fail at [^]]*\] (data\. )?", "", (str(error).strip() or type(error).__name__))
    detail = ". ".join(detail.splitlines()[0].split(". ")[:2])  # e.g. CUDA out of memory. Tried to allocate 2.00 GiB
    names = [kind.__name__ for kind in type(error).__mro__]
    if "MemoryError" in names or "OutOfMemoryError" in names or re.search(
            r"out of memory|DefaultCPUAllocator|can't allocate memory", detail, re.I):
        return f"out of memory ({detail}); lower {lower}"
    if "BackendCompilerFailed" in names or any(kind.__module__.startswith(("torch._dynamo", "torch._inductor"))
                                               for kind in type(error).__mro__):
        return compile_failure(error, compile_off)
    return None


def compile_failure(error, compile_off="use --compile=False"):
    """The one line for a torch.compile that failed, whatever the torch release and the error's class."""
    while getattr(error, "inner_exception", None) is not None:  # BackendCompilerFailed: the backend's own error
        error = error.inner_exception
    detail = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
    no_compiler = re.search(r"compiler|g\+\+|gcc|\bcc\b|cl\.exe|CalledProcessError", detail, re.I)
    return (f"torch.compile could not build the model ({type(error).__name__}: {detail}); {compile_off}"
            + (", or install a C++ compiler" if no_compiler else ""))


def on_ctrl_c(message, lower="the sizes asked for", compile_off="use --compile=False"):
    """Make Ctrl-C, SIGTERM and SIGHUP stop the script with one line, `interrupted: message` (what is kept, how to go
    on), and exit status 130, instead of a traceback; running out of memory (lower: the settings to lower) or a failed
    torch.compile, with one line `error: ...`. Also script_start's printing that never fails."""
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


def read_config(path):
    """The settings a config file assigns, {name: value}; an error in it names the file and line, not a traceback.
    A config file may import a sibling it extends: `from config.cpu_base import *`."""
    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        namespace = {}
        exec(code, namespace)
    except UnicodeDecodeError as e:
        fail(f"config file {path} is not text (byte {e.start} is not UTF-8); "
             f"give a Python file like config/cpu_baseline.py")
    except SyntaxError as e:  # also in a config file it imports
        fail(f"config file {e.filename} line {e.lineno}: {e.msg}; fix the Python there")
    except ValueError as e:  # a NUL byte
        fail(f"config file {path} is not Python source ({e}); give a Python file like config/cpu_baseline.py")
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.filename != __file__ and not f.filename.startswith(("<", sys.prefix, sys.base_prefix))]
        where = f"{frames[-1].filename} line {frames[-1].lineno}" if frames else path
        fail(f"config file {where} raised {type(e).__name__}: {e}; fix the Python there")
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, type(sys))}


def pick_device(device, dtype="float32"):
    """The device and precision every script runs in, checked in this one place. device: auto (cuda, then mps, then
    cpu), cpu, cuda, cuda:N or mps; dtype: auto (bfloat16 on a GPU that has it, float16 on an older one, float32
    elsewhere), float32, bfloat16 or float16. Returns (device, dtype); one line `error: ...` where impossible."""
    import torch  # here, not at the top: the scripts that only read configs do not need it
    has_mps = torch.backends.mps.is_available()
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"device={device!r} but CUDA is not available here; use --device=auto or --device=cpu")
    if device.startswith("cuda") and int(device[5:] or 0) >= torch.cuda.device_count():
        fail(f"device={device!r} but there are only {torch.cuda.device_count()} CUDA devices; use --device=cuda:0")
    if device == "mps" and not has_mps:
        fail("device='mps' but MPS (the GPU of Apple silicon) is not available here; use --device=auto or --device=cpu")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    if dtype == "auto":  # not torch.cuda.is_bf16_supported(): it counts the slow emulated bf16 of a T4 or V100
        dtype = "float32" if not device.startswith("cuda") else (
            "bfloat16" if torch.cuda.get_device_capability(device)[0] >= 8 else "float16")
    if device == "mps" and dtype != "float32":
        fail(f"dtype={dtype!r} on mps is not supported here; use --dtype=float32 or --dtype=auto")
    if device == "cpu" and dtype != "float32":
        print(f"note: {dtype} autocast on the CPU is slow; it is here to test the code path a GPU takes", flush=True)
    return device, dtype


def suggestion(key, known, command="python train.py"):
    """'did you mean ...?' for an unknown key: its name here if it is a nanoGPT or Hugging Face name or written with
    '-' for '_', else the closest known key."""
    if ALIASES.get(key) in known:
        return f"did you mean '{ALIASES[key]}'? ({key} is called {ALIASES[key]} here)"
    close = [key.replace("-", "_")] if key.replace("-", "_") in known else difflib.get_close_matches(
        key, known, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"see {command} --help"


def unknown_argument(arg, known, command="python train.py"):
    """The one line for a command-line argument that is no known --key: the same in every script."""
    key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if not key:  # '--' alone, '-key', a stray word
        return f"'{arg}' is not a setting; write --key=value or --key value (see {command} --help)"
    return f"unknown config key '{key}' in the command line; {suggestion(key, known, command)}"


def print_help(defaults, sources, model_config, epilog):
    """Every setting with its default and the comment beside it in the script's or the model config's source."""
    comments = {}
    for line in sources:
        match = re.match(r"\s*(\w+)\b[^#]*=[^#]*#\s*(.*)", line)
        if match and match[1] in defaults:
            comments.setdefault(match[1], match[2])
    model_defaults = {f.name: f.default for f in dataclasses.fields(model_config)}
    model_defaults["vocab_size"] = "None"  # the dataset's, from its meta.json
    print("usage: python train.py [config/file.py ...] [--key=value ...]  (later ones win; a config file is Python\n"
          "assignments like `n_layer = 4`; --key value works too, and a bare --flag means --flag=True). The settings,\n"
          "with their defaults:\n")
    for key, value in defaults.items():
        if key == "variant":
            print("\nmodel settings (ModelConfig in model.py); None keeps the variant's default:")
        value = model_defaults.get(key, '""' if value == "" else value)
        meaning = comments.get(key, "see ModelConfig in model.py")
        line = f"  --{key}={value}"
        print(line.ljust(40) + (" " + meaning if len(line) < 40 else "\n" + " " * 40 + meaning))
    print(epilog)


def split_args(argv, types=None):
    """(key, text) of each --key=value, --key value and bare --flag of argv, and (None, arg) of anything else (a config
    file, a bare '--'). A key takes the next argument unless that is an option (a key typed bool in `types`: or a
    .py config file); where it takes none, a bool is "True", another known key has text None (no value), and a key not
    in `types` (another script's setting) is a flag, "True"."""
    types, args, pairs = types or {}, list(argv), []
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            pairs.append((None, arg))
            continue
        key, has_value, text = arg[2:].partition("=")
        if not key and not has_value:  # '--' alone: no setting, named as typed
            pairs.append((None, arg))
            continue
        if not has_value:
            boolean = types.get(key) is bool
            # a boolean takes the next word unless it is an option or a config file, to refuse it naming the flag
            takes_next = bool(args) and not args[0].startswith("--") and not (boolean and args[0].endswith(".py"))
            text = args.pop(0) if takes_next else None if key in types and not boolean else "True"
        pairs.append((key, text))
    return pairs


def true_or_false(text):
    """argparse's type of a boolean setting: True or False, in any case."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not True or False")
    return text.lower() == "true"


def add_flag(parser, name, help, default=False):
    """A boolean setting of an argparse script, as train.py takes one: --flag (True), --flag=false, --flag True."""
    parser.add_argument(name, type=true_or_false, nargs="?", const=True, default=default, metavar="True|False",
                        help=help)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The argparse scripts' --help: the docstring as written, and each setting's default, as train.py shows it."""

    def _get_help_string(self, action):
        shown = "default" in (action.help or "") or action.default in (None, argparse.SUPPRESS)
        return action.help if shown or not action.option_strings else f"{action.help} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with train.py's message for an argument it does not know: its name and the closest known one."""

    def parse_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(unknown_argument(extra[0], [o[2:] for a in self._actions for o in a.option_strings
                                                   if o.startswith("--") and a.help != argparse.SUPPRESS],
                                        self.prog))
        return namespace


def argument_parser(doc, command):
    """The argparse parser of a script other than train.py: --key=value or --key value, no abbreviated names, help
    showing the defaults, and bad input is one line `error: ...` (an unknown key: its did-you-mean) naming
    `command --help` instead of argparse's usage block."""
    parser = ArgumentParser(prog=command, description=doc, formatter_class=HelpFormatter, allow_abbrev=False)
    parser.error = lambda message: fail(message if f"{command} --help" in message else
                                        f"{message} (see {command} --help)")
    return parser


def configure(settings, defaults, argv, model_config, epilog=""):
    """Apply config files and --key=value arguments (argv) to `settings` (a script's globals()), checking each key
    and type against `defaults`; model_config is the dataclass whose fields are settings too. Returns the keys set."""
    types = {k: type(v) for k, v in defaults.items()}
    # Optional[int] -> int
    types.update({f.name: (typing.get_args(f.type) or (f.type,))[0] for f in dataclasses.fields(model_config)})
    user_set = set()

    def set_config(key, value, source, text=None):
        if key not in defaults:
            fail(f"unknown config key '{key}' in {source}; {suggestion(key, defaults)}")
        want = types[key]
        if want is str and text is not None and not isinstance(value, str):
            value = text  # --out_dir=2024 means the string
        if want is bool and text is not None and text.lower() in ("true", "false"):
            value = text.lower() == "true"  # --compile=true as --compile=True
        if want is float and type(value) is int:
            value = float(value)
        if want is bool and text is not None and type(value) is not bool:
            fail(f"--{key} {text}: {key} takes True or False (any case), not {text!r}; write --{key} (True), "
                 f"--{key}=True or --{key}=False")
        if not (type(value) is want or (value is None and defaults[key] is None)):
            fail(f"{key}={value!r} in {source} has the wrong type: {key} takes "
                 f"{'True or False' if want is bool else 'a ' + want.__name__}, not a {type(value).__name__}")
        settings[key] = value
        user_set.add(key)

    if "--help" in argv or "-h" in argv:
        source_lines = open(settings["__file__"]).read().splitlines() + inspect.getsource(model_config).splitlines()
        print_help(defaults, source_lines, model_config, epilog)
        sys.exit(0)
    for key, text in split_args(argv, types):
        if key is None:
            if text.startswith("-"):  # '--' alone, '-key=value'
                fail(unknown_argument(text, defaults))
            if not os.path.isfile(text):
                fail(f"config file '{text}' not found; give a path like config/cpu_baseline.py, "
                     f"or options as --key=value")
            for key, value in read_config(text).items():
                set_config(key, value, text)
            continue
        if key not in defaults:
            fail(unknown_argument(f"--{key}", defaults))
        if text is None:
            fail(f"'--{key}' has no value; write --{key}=VALUE or --{key} VALUE (python train.py --help lists them)")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text  # a bare word: a string
        set_config(key, value, "the command line", text)
    return user_set

# -----------------------------------------------------------------------------
# the device's clock: waiting for its queued work, timing a forward pass, its matmul peak (train.py's ETA and MFU)


def sync(device):
    """Wait for the device's queued work, so that a timer measures it (a GPU runs asynchronously)."""
    import torch
    if str(device).startswith(("cuda", "mps")):
        getattr(torch, str(device).split(":")[0]).synchronize()


def matmul_peak(device, dtype, n, repeats, warmup=2, pick=statistics.median):
    """FLOP/s of an n x n x n matmul in dtype: the peak that MFU is measured against (here the median of the timed
    repeats; train.py takes the fastest of 10 with no warm-up, since a CPU has no datasheet peak)."""
    import torch
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
    """Seconds of one evaluation forward pass (the faster of two: the first warms up); a training step costs ~3."""
    import torch
    was_training, seconds = model.training, []
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
