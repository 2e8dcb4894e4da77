"""The command line of every script. train.py's settings, nanoGPT style: globals with
defaults, then config files (`n_layer = 4`), then --key=value or --key value (a bool: a
bare --flag too), later ones winning. The other scripts take theirs through argparse, with
the same grammar and the same messages (argument_parser)."""
import argparse
import ast
import dataclasses
import difflib
import glob
import inspect
import os
import re
import sys
import traceback
import typing

from machinery.process import fail

# the name here of a setting that nanoGPT or a Hugging Face config calls otherwise
ALIASES = {
    "context_size": "block_size n_ctx n_positions max_position_embeddings seq_len",
    "n_embed": "n_embd hidden_size d_model", "n_head": "n_heads num_heads num_attention_heads",
    "n_layer": "n_layers num_layers num_hidden_layers", "max_iters": "max_steps",
    "dropout": "attn_pdrop resid_pdrop embd_pdrop hidden_dropout_prob",
    "learning_rate": "lr", "min_lr": "min_learning_rate", "warmup_iters": "warmup_steps",
    "lr_decay_iters": "lr_decay_steps", "grad_clip": "max_grad_norm", "beta1": "adam_beta1",
    "beta2": "adam_beta2", "eval_interval": "eval_steps", "log_interval": "logging_steps",
    "out_dir": "output_dir", "batch_size": "per_device_train_batch_size micro_batch_size"}


def configure(settings, defaults, argv, model_config):
    """argv's config files and --key=value into settings (globals()); the keys set."""
    if "--help" in argv or "-h" in argv:
        print_help(settings["__file__"], defaults, model_config)
    types = types_of(defaults, model_config)
    user_set = set()
    for key, text in split_args(argv, types):
        if key is None:  # a config file
            pairs = read_config(text).items()
        else:
            pairs = [(key, command_line_value(key, text, types))]
        apply(settings, defaults, pairs, text if key is None else "the command line", model_config)
        user_set.update(name for name, _ in pairs)
    return user_set


def types_of(defaults, model_config):
    """The type each setting takes: its default's, or its ModelConfig field's."""
    types = {k: type(v) for k, v in defaults.items()}
    types.update({f.name: (typing.get_args(f.type) or (f.type,))[0]
                  for f in dataclasses.fields(model_config)})  # Optional[int] -> int
    return types


def apply(settings, defaults, pairs, source, model_config):
    """The (name, value) pairs of source (a config file, the command line, a checkpoint's
    settings, tasks' DEFAULTS) into settings, each a setting of its type, or one line."""
    types = types_of(defaults, model_config)
    for name, value in pairs:
        settings[name] = checked(name, value, types, defaults, source)


def split_args(argv, types=None):
    """(key, text) of each --key=value, --key value, bare --flag; (None, arg) of others. A
    key takes the next argument unless it is an option (or, for a bool, a .py file); with
    none, a bool or another script's key (not in types) is "True", other settings None."""
    types = types or {}
    args = list(argv)
    pairs = []
    while args:
        arg = args.pop(0)
        key, has_value, text = arg[2:].partition("=")
        if not arg.startswith("--") or arg == "--":
            pairs.append((None, arg))
        elif has_value:
            pairs.append((key, text))
        elif args and not args[0].startswith("--") and not (
                types.get(key) is bool and args[0].endswith(".py")):
            pairs.append((key, args.pop(0)))
        else:
            pairs.append((key, None if key in types and types[key] is not bool else "True"))
    return pairs


def command_line_value(key, text, types):
    """--key=text's value: a string as typed (--out_dir=2024), True/False, a literal."""
    if text is None:
        fail(f"'--{key}' has no value; write --{key}=VALUE or --{key} VALUE (python "
             "train.py --help lists them)")
    if types.get(key) is bool:
        if text.lower() not in ("true", "false"):
            fail(f"--{key} {text}: {key} takes True or False (any case), not {text!r}; "
                 f"write --{key} (True), --{key}=True or --{key}=False")
        return text.lower() == "true"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string
    return text if types.get(key) is str and not isinstance(value, str) else value


def checked(key, value, types, defaults, source):
    """value, if key is a setting and value is of its type (an int is a float too)."""
    if types.get(key) is float and type(value) is int:
        value = float(value)
    if not key:  # '--=value'
        fail(unknown_argument("--", defaults))
    if key not in defaults:
        fail(f"unknown config key '{key}' in {source}; {suggestion(key, defaults)}")
    if not (type(value) is types[key] or (value is None and defaults[key] is None)):
        names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
        fail(f"{key}={value!r} in {source} has the wrong type: {key} takes "
             f"{names[types[key]]}, not {names.get(type(value), type(value).__name__)}")
    return value


def read_config(path):
    """The settings a config file assigns, {name: value}, or one line naming its file and
    line. A config file may extend a sibling: `from config.cpu_base import *`."""
    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        namespace = {}
        exec(code, namespace)
    except (Exception, SystemExit) as e:  # sys.exit() would end the script without a word
        fail(config_error(path, e))
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, type(sys))}


def config_error(path, e):
    """The one line for a config file missing or failing to run: where, and the fix."""
    if path.startswith("-"):  # '--' alone, '-key=value'
        return unknown_argument(path, ())
    if isinstance(e, SystemExit):
        return (f"config file {path} called sys.exit({e.code!r}); a config file only "
                "assigns settings: remove that call")
    if isinstance(e, OSError) and not os.path.isfile(path):
        # the near names in its folder and in config/, by the file's name alone
        paths = {*glob.glob(os.path.join(os.path.dirname(path), "*.py")), *glob.glob("config/*.py")}
        named = {os.path.basename(p): p for p in sorted(paths)}
        near = difflib.get_close_matches(os.path.basename(path), named, n=2, cutoff=0.75)
        return (f"config file '{path}' not found; "
                + f"did you mean {' or '.join(named[n] for n in near)}? " * bool(near)
                + "give a path like config/cpu_baseline.py, or options as --key=value")
    if isinstance(e, SyntaxError) and e.lineno:  # also in a config file it imports
        return f"config file {e.filename} line {e.lineno}: {e.msg}; fix the Python there"
    frames = [f for f in traceback.extract_tb(e.__traceback__)  # the config's, not ours
              if os.path.abspath(f.filename) != os.path.abspath(__file__)
              and not f.filename.startswith(("<", sys.prefix, sys.base_prefix))]
    if not frames:  # e.g. not UTF-8, or null bytes
        return (f"config file {path} is not Python source ({type(e).__name__}: {e}); "
                "give a file like config/cpu_baseline.py")
    return (f"config file {frames[-1].filename} line {frames[-1].lineno} raised "
            f"{type(e).__name__}: {e}; fix the Python there")


def print_help(script, defaults, model_config):
    """Each setting, its default and its comment in the script or in ModelConfig."""
    comments = {}
    for line in open(script).read().splitlines() + inspect.getsource(model_config).splitlines():
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
        shown = model_defaults.get(key, '""' if value == "" else value)
        line = f"  --{key}={shown}"
        meaning = comments.get(key, "see ModelConfig in model.py")
        print(line.ljust(40) + (" " + meaning if len(line) < 40 else "\n" + " " * 40 + meaning))
    print("\nA generated task, such as --dataset=reversal, uses its own small model and "
          "schedule for the settings not\ngiven (its module's DEFAULTS, in tasks/).")
    sys.exit(0)


def suggestion(key, known, command="python train.py"):
    """'did you mean ...?' for an unknown key: its name here for a nanoGPT or Hugging Face
    name or one written with '-' for '_', else the closest known key."""
    here = [name for name, names in ALIASES.items() if key in names.split() and name in known]
    if here:
        return f"did you mean '{here[0]}'? ({key} is called {here[0]} here)"
    close = [key.replace("-", "_")] if key.replace("-", "_") in known else \
        difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"see {command} --help"


def unknown_argument(arg, known, command="python train.py"):
    """The one line for an argument that is no known --key: the same in every script."""
    key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if not key:  # '--' alone, '-key', a stray word
        return f"'{arg}' is not a setting; write --key=value or --key value (see {command} --help)"
    return f"unknown config key '{key}' in the command line; {suggestion(key, known, command)}"


def argument_parser(doc, command):
    """argparse for any script but train.py: --help prints doc and each flag's default; no
    abbreviations; bad input is one line `error: ...` (unknown key: train.py's line)."""
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass  # the docstring as written, and each default

    class ArgumentParser(argparse.ArgumentParser):
        def parse_args(self, args=None, namespace=None):
            namespace, extra = super().parse_known_args(args, namespace)
            if extra:
                known = [o[2:] for a in self._actions for o in a.option_strings
                         if o.startswith("--") and a.help != argparse.SUPPRESS]
                self.error(unknown_argument(extra[0], known, command))
            return namespace

        def error(self, message):
            fail(message if f"{command} --help" in message else f"{message} (see {command} --help)")
    return ArgumentParser(prog=command, description=doc, formatter_class=Formatter,
                          allow_abbrev=False)


def add_flag(parser, name, help, default=False):
    """A boolean flag, as train.py takes one: --flag (True), --flag=false, --flag True."""
    def true_or_false(text):
        if text.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{text!r} is not True or False")
        return text.lower() == "true"
    parser.add_argument(name, type=true_or_false, nargs="?", const=True, default=default,
                        metavar="True|False", help=help)
