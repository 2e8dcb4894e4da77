"""
How the scripts take their settings, nanoGPT style: plain globals with defaults, then config files
(Python assignments such as `n_layer = 4`), then `--key=value` arguments; later ones win. Also
`--help`, and "did you mean" for a mistyped key.

    defaults = {...: the script's settings}
    user_set = configure(globals(), defaults, sys.argv[1:], ModelConfig)
    parser = argument_parser(__doc__, "python sample.py")  # other scripts: argparse, same grammar
    add_flag(parser, "--compile", "torch.compile the model")  # --compile, --compile=false, ...
    read_config("config/cpu_baseline.py")   # {name: value}, for any script that reads a config file

One grammar for every script: --key=value or --key value; a boolean as a bare --flag (True) or
--flag=True/False in any case.
"""
import argparse
import ast
import dataclasses
import difflib
import inspect
import os
import re
import sys
import traceback
import typing

from machinery.process import fail

# names from nanoGPT and Hugging Face configs, and what the same setting is called here
ALIASES = {
    "block_size": "context_size", "n_ctx": "context_size", "n_positions": "context_size",
    "max_position_embeddings": "context_size", "seq_len": "context_size",
    "n_embd": "n_embed", "hidden_size": "n_embed", "d_model": "n_embed",
    "n_layers": "n_layer", "num_layers": "n_layer", "num_hidden_layers": "n_layer",
    "n_heads": "n_head", "num_heads": "n_head", "num_attention_heads": "n_head",
    "attn_pdrop": "dropout", "resid_pdrop": "dropout", "embd_pdrop": "dropout",
    "hidden_dropout_prob": "dropout",
    "lr": "learning_rate", "min_learning_rate": "min_lr", "max_steps": "max_iters",
    "warmup_steps": "warmup_iters", "lr_decay_steps": "lr_decay_iters",
    "max_grad_norm": "grad_clip",
    "adam_beta1": "beta1", "adam_beta2": "beta2",
    "eval_steps": "eval_interval", "logging_steps": "log_interval", "output_dir": "out_dir",
    "per_device_train_batch_size": "batch_size", "micro_batch_size": "batch_size",
}


def read_config(path):
    """The settings a config file assigns, {name: value}; an error in it names the file and line,
    not a traceback. A config file may import a sibling it extends:
    `from config.cpu_base import *`."""
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
    except SystemExit as e:  # sys.exit() in a config file would end the script without a word
        fail(f"config file {path} called sys.exit({e.code!r}); a config file only assigns "
             f"settings: remove that call")
    except ValueError as e:  # a NUL byte
        fail(f"config file {path} is not Python source ({e}); give a Python file like "
             f"config/cpu_baseline.py")
    except Exception as e:
        outside = ("<", sys.prefix, sys.base_prefix)
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.filename != __file__ and not f.filename.startswith(outside)]
        where = f"{frames[-1].filename} line {frames[-1].lineno}" if frames else path
        fail(f"config file {where} raised {type(e).__name__}: {e}; fix the Python there")
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, type(sys))}


def suggestion(key, known, command="python train.py"):
    """'did you mean ...?' for an unknown key: its name here if it is a nanoGPT or Hugging Face name
    or written with '-' for '_', else the closest known key."""
    if ALIASES.get(key) in known:
        return f"did you mean '{ALIASES[key]}'? ({key} is called {ALIASES[key]} here)"
    if key.replace("-", "_") in known:
        close = [key.replace("-", "_")]
    else:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"see {command} --help"


def unknown_argument(arg, known, command="python train.py"):
    """The one line for a command-line argument that is no known --key: the same in every script."""
    key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if not key:  # '--' alone, '-key', a stray word
        return f"'{arg}' is not a setting; write --key=value or --key value (see {command} --help)"
    return f"unknown config key '{key}' in the command line; {suggestion(key, known, command)}"


def print_help(defaults, sources, model_config, epilog):
    """Every setting with its default and the comment beside it in the script's or the model
    config's source."""
    comments = {}
    for line in sources:
        match = re.match(r"\s*(\w+)\b[^#]*=[^#]*#\s*(.*)", line)
        if match and match[1] in defaults:
            comments.setdefault(match[1], match[2])
    model_defaults = {f.name: f.default for f in dataclasses.fields(model_config)}
    model_defaults["vocab_size"] = "None"  # the dataset's, from its meta.json
    print("usage: python train.py [config/file.py ...] [--key=value ...]  (later ones win; "
          "a config file is Python\nassignments like `n_layer = 4`; --key value works too, "
          "and a bare --flag means --flag=True). The settings,\nwith their defaults:\n")
    for key, value in defaults.items():
        if key == "variant":
            print("\nmodel settings (ModelConfig in model.py); None keeps the variant's default:")
        value = model_defaults.get(key, '""' if value == "" else value)
        meaning = comments.get(key, "see ModelConfig in model.py")
        line = f"  --{key}={value}"
        print(line.ljust(40) + (" " + meaning if len(line) < 40 else "\n" + " " * 40 + meaning))
    print(epilog)


def split_args(argv, types=None):
    """(key, text) of each --key=value, --key value and bare --flag of argv, and (None, arg) of
    anything else (a config file, a bare '--'). A key takes the next argument unless that is an
    option (a key typed bool in `types`: or a .py config file); where it takes none, a bool is
    "True", another known key has text None (no value), and a key not in `types` (another script's
    setting) is a flag, "True"."""
    types = types or {}
    args = list(argv)
    pairs = []
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
            # a boolean takes the next word unless it is an option or a config file (refused, named)
            takes_next = (bool(args) and not args[0].startswith("--")
                          and not (boolean and args[0].endswith(".py")))
            if takes_next:
                text = args.pop(0)
            else:
                text = None if key in types and not boolean else "True"
        pairs.append((key, text))
    return pairs


def true_or_false(text):
    """argparse's type of a boolean setting: True or False, in any case."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not True or False")
    return text.lower() == "true"


def add_flag(parser, name, help, default=False):
    """A boolean setting of an argparse script, as train.py takes one: --flag (True), --flag=false,
    --flag True."""
    parser.add_argument(name, type=true_or_false, nargs="?", const=True, default=default,
                        metavar="True|False", help=help)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The argparse scripts' --help: the docstring as written, and each setting's default, as
    train.py shows it."""

    def _get_help_string(self, action):
        shown = "default" in (action.help or "") or action.default in (None, argparse.SUPPRESS)
        if shown or not action.option_strings:
            return action.help
        return f"{action.help} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with train.py's message for an argument it does not know: its name and the closest
    known one."""

    def parse_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            known = [o[2:] for a in self._actions for o in a.option_strings
                     if o.startswith("--") and a.help != argparse.SUPPRESS]
            self.error(unknown_argument(extra[0], known, self.prog))
        return namespace


def argument_parser(doc, command):
    """The argparse parser of a script other than train.py: --key=value or --key value, no
    abbreviated names, help showing the defaults, and bad input is one line `error: ...` (an unknown
    key: its did-you-mean) naming `command --help` instead of argparse's usage block."""
    parser = ArgumentParser(prog=command, description=doc, formatter_class=HelpFormatter,
                            allow_abbrev=False)

    def error(message):
        fail(message if f"{command} --help" in message else f"{message} (see {command} --help)")
    parser.error = error
    return parser


def configure(settings, defaults, argv, model_config, epilog=""):
    """Apply config files and --key=value arguments (argv) to `settings` (a script's globals()),
    checking each key and type against `defaults`; model_config is the dataclass whose fields are
    settings too. Returns the keys set."""
    types = {k: type(v) for k, v in defaults.items()}
    # Optional[int] -> int
    types.update({f.name: (typing.get_args(f.type) or (f.type,))[0]
                  for f in dataclasses.fields(model_config)})
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
            fail(f"--{key} {text}: {key} takes True or False (any case), not {text!r}; write "
                 f"--{key} (True), --{key}=True or --{key}=False")
        if not (type(value) is want or (value is None and defaults[key] is None)):
            takes = "True or False" if want is bool else "a " + want.__name__
            fail(f"{key}={value!r} in {source} has the wrong type: {key} takes {takes}, not a "
                 f"{type(value).__name__}")
        settings[key] = value
        user_set.add(key)

    if "--help" in argv or "-h" in argv:
        source_lines = open(settings["__file__"]).read().splitlines()
        source_lines += inspect.getsource(model_config).splitlines()
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
            fail(f"'--{key}' has no value; write --{key}=VALUE or --{key} VALUE (python train.py "
                 f"--help lists them)")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text  # a bare word: a string
        set_config(key, value, "the command line", text)
    return user_set
