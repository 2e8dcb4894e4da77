"""Command lines: train.py's globals, then config files (`n_layer = 4`), then --key=value,
--key value or a bare --flag, later ones winning; argparse in the others, alike."""
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


def configure(settings, defaults, argv, model_config):
    """argv's config files and --key=value into settings; the keys set."""
    if "--help" in argv or "-h" in argv:
        print_help(settings["__file__"], defaults, model_config)
    types = types_of(defaults, model_config)
    user_set = set()
    for key, text in split_args(argv, types):
        if key is None:  # a config file
            pairs, source = read_config(text).items(), text
        else:
            pairs, source = [(key, command_line_value(key, text, types))], "the command line"
        apply(settings, defaults, pairs, source, model_config)
        user_set.update(name for name, _ in pairs)
    return user_set


def types_of(defaults, model_config):
    """The type each setting takes: its default's, or its ModelConfig field's."""
    types = {k: type(v) for k, v in defaults.items()}
    types.update({f.name: (typing.get_args(f.type) or (f.type,))[0]
                  for f in dataclasses.fields(model_config)})  # Optional[int] -> int
    return types


def apply(settings, defaults, pairs, source, model_config):
    """source's (key, value) pairs into settings, checked (a known key, of its type)."""
    types = types_of(defaults, model_config)
    for key, value in pairs:
        if types.get(key) is float and type(value) is int:
            value = float(value)
        if key not in defaults:
            fail(f"unknown config key '{key}' in {source}; {suggestion(key, defaults)}")
        if not (type(value) is types[key] or (value is None and defaults[key] is None)):
            names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
            fail(f"{key}={value!r} in {source} has the wrong type: {key} takes "
                 f"{names[types[key]]}, not {names.get(type(value), type(value).__name__)}")
        settings[key] = value


def split_args(argv, types=None):
    """(key, text) of each --key=value, --key value, bare --flag (text "True"; None if not a
    bool); (None, arg) of others. A bool takes no .py file as its value."""
    types = types or {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        key, has_value, text = arg[2:].partition("=")
        if not arg.startswith("--") or arg == "--":
            yield None, arg
        elif has_value:
            yield key, text
        elif args and not args[0].startswith("--") and not (
                types.get(key) is bool and args[0].endswith(".py")):
            yield key, args.pop(0)
        else:
            yield key, None if key in types and types[key] is not bool else "True"


def command_line_value(key, text, types):
    """--key=text's value: text as typed (--out_dir=2024), True/False, a literal."""
    if text is None:
        fail(f"'--{key}' has no value; write --{key}=VALUE or --{key} VALUE")
    if types.get(key) is bool:
        if text.lower() not in ("true", "false"):
            fail(f"--{key} {text}: {key} takes True or False (any case), not {text!r}; "
                 f"write --{key}=True or --{key}=False")
        return text.lower() == "true"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string
    return text if types.get(key) is str and not isinstance(value, str) else value


def read_config(path):
    """{name: value} a config file assigns (it may extend one: `from config.cpu_base import *`),
    or one line naming its file and line."""
    if path.startswith("-"):  # '--' alone, '-key=value'
        fail(unknown_argument(path, ()))
    if not os.path.isfile(path):
        fail(f"config file '{path}' not found; give a path like config/cpu_baseline.py, "
             "or options as --key=value")
    namespace = {}
    try:
        with open(path, encoding="utf-8") as f:
            exec(compile(f.read(), path, "exec"), namespace)
    except (Exception, SystemExit) as e:
        # sys.exit() too: it would end the script silently
        # the line in this file (a SyntaxError names its file and line itself)
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        where = f" line {lines[-1]}" if lines and not isinstance(e, SyntaxError) else ""
        fail(f"config file {path}{where} raised {type(e).__name__}: {e}; a config file "
             "only assigns settings: fix it")
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, type(sys))}


def print_help(script, defaults, model_config):
    """Each setting, its default and its comment in the script or in ModelConfig."""
    comments = {}
    for line in open(script).read().splitlines() + inspect.getsource(model_config).splitlines():
        match = re.match(r"\s*(\w+)\b[^#]*=[^#]*#\s*(.*)", line)
        if match and match[1] in defaults:
            comments.setdefault(match[1], match[2])
    shown = {f.name: f.default for f in dataclasses.fields(model_config)} | {"vocab_size": None}
    print("usage: python train.py [config/file.py ...] [--key=value ...], later ones winning\n"
          "(a config file assigns settings: `n_layer = 4`; ModelConfig's from variant on)\n")
    for key, value in defaults.items():
        line = f"  --{key}=" + str(shown.get(key, value if value != "" else '""'))
        print(f"{line:<40} {comments.get(key, '')}")
    print("\nA generated task (--dataset=reversal) has its own model and schedule (tasks/).")
    sys.exit(0)


def suggestion(key, known, command="python train.py"):
    """'did you mean ...?' for an unknown key: the closest ('-' read as '_')."""
    close = difflib.get_close_matches(key.replace("-", "_"), known, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"see {command} --help"


def unknown_argument(arg, known, command="python train.py"):
    """The one line for an argument that is no known --key (train.py, a study)."""
    key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if not key:  # '--' alone, '-key', a stray word
        return f"'{arg}' is not a setting; write --key=value or --key value (see {command} --help)"
    return f"unknown config key '{key}' in the command line; {suggestion(key, known, command)}"


def argument_parser(doc, command):
    """argparse for the other scripts: --help prints doc and defaults; no abbreviations; bad
    input (an unknown flag: argparse's words) is one line."""
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass  # the docstring as written, and each default

    class ArgumentParser(argparse.ArgumentParser):
        def error(self, message):
            fail(f"{message} (see {command} --help)")
    return ArgumentParser(prog=command, description=doc, formatter_class=Formatter,
                          allow_abbrev=False)


def add_flag(parser, name, help, default=False):
    """A boolean flag, as train.py's: --flag (True), --flag=false, --flag True."""
    def true_or_false(text):
        if text.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{text!r} is not True or False")
        return text.lower() == "true"
    parser.add_argument(name, type=true_or_false, nargs="?", const=True, default=default,
                        metavar="True|False", help=help)
