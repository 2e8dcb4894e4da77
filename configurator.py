"""train.py's settings, nanoGPT style: globals with defaults, then config files (`n_layer = 4`),
then --key=value or --key value (a bool: a bare --flag too), later ones winning (the other scripts
read theirs as train.py does: machinery/scripts.py)."""
import ast
import dataclasses
import sys
import typing

from machinery.process import fail


def configure(settings, defaults, argv, model_config):
    """argv's config files and --key=value into `settings` (globals()), checked; the keys set."""
    types = {k: type(v) for k, v in defaults.items()}
    types.update({f.name: (typing.get_args(f.type) or (f.type,))[0]  # Optional[int] -> int
                  for f in dataclasses.fields(model_config)})
    if "--help" in argv or "-h" in argv:
        print_help(settings["__file__"], defaults, model_config)
    user_set = set()
    for key, text in split_args(argv, types):
        if key is None:  # a config file
            source = text
            pairs = read_config(text).items()
        else:
            source = "the command line"
            pairs = [(key, command_line_value(key, text, types, defaults))]
        for name, value in pairs:
            settings[name] = checked(name, value, types, defaults, source)
            user_set.add(name)
    return user_set


def split_args(argv, types=None):
    """(key, text) of each --key=value, --key value and bare --flag, (None, arg) of anything else (a
    config file, '--'). A key takes the next argument unless that is an option (a bool: or a .py
    file); where it takes none, a bool is "True", another key of `types` None (no value), and a key
    not in `types` (another script's) a flag, "True"."""
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


def command_line_value(key, text, types, defaults):
    """--key=text's value: a string as typed (--out_dir=2024), True/False in any case, a literal."""
    if text is None or types.get(key) is bool and text.lower() not in ("true", "false"):
        from machinery.errors import bad_argument
        bad_argument(key, text)
    if types.get(key) is bool:
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
    if key not in defaults or not (type(value) is types[key]
                                   or (value is None and defaults[key] is None)):
        from machinery.errors import bad_setting
        bad_setting(key, value, types, defaults, source)
    return value


def read_config(path):
    """The settings a config file assigns, {name: value}; an error in it names the file and line,
    not a traceback. A config file may import a sibling it extends:
    `from config.cpu_base import *`."""
    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        namespace = {}
        exec(code, namespace)
    except (Exception, SystemExit) as e:  # sys.exit() in one would end the script without a word
        from machinery.errors import config_error
        fail(config_error(path, e))
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, type(sys))}


def print_help(script, defaults, model_config):
    """Every setting with its default and the comment beside it in the script's or the model
    config's source; then exit."""
    import inspect
    import re
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
        value = model_defaults.get(key, '""' if value == "" else value)
        meaning = comments.get(key, "see ModelConfig in model.py")
        line = f"  --{key}={value}"
        print(line.ljust(40) + (" " + meaning if len(line) < 40 else "\n" + " " * 40 + meaning))
    print("\nA generated task, such as --dataset=reversal, uses its own small model and schedule "
          "for the settings not\ngiven (its module's DEFAULTS, in tasks/).")
    sys.exit(0)
