"""What the scripts other than train.py share (sample.py, evaluate.py, prepare_wikipedia.py, the
laboratory's): a command line read as train.py reads its own, and a stop in one line."""
import os
import sys

from machinery.process import fail, machine_error, script_start


def argument_parser(doc, command):
    """The argparse parser of a script other than train.py: --key=value or --key value, no
    abbreviated names, help showing the defaults, and bad input is one line `error: ...` (an unknown
    key: its did-you-mean) naming `command --help` instead of argparse's usage block."""
    import argparse

    class HelpFormatter(argparse.RawDescriptionHelpFormatter):  # the docstring as written
        def _get_help_string(self, action):  # and each default, as train.py shows them
            shown = "default" in (action.help or "") or action.default in (None, argparse.SUPPRESS)
            if shown or not action.option_strings:
                return action.help
            return f"{action.help} (default: %(default)s)"

    class ArgumentParser(argparse.ArgumentParser):
        def parse_args(self, args=None, namespace=None):
            namespace, extra = super().parse_known_args(args, namespace)
            if extra:  # train.py's line: its name and the closest known one
                from machinery.errors import unknown_argument
                known = [o[2:] for a in self._actions for o in a.option_strings
                         if o.startswith("--") and a.help != argparse.SUPPRESS]
                self.error(unknown_argument(extra[0], known, self.prog))
            return namespace

        def error(self, message):
            fail(message if f"{command} --help" in message else f"{message} (see {command} --help)")
    return ArgumentParser(prog=command, description=doc, formatter_class=HelpFormatter,
                          allow_abbrev=False)


def add_flag(parser, name, help, default=False):
    """A boolean setting of an argparse script, as train.py takes one: --flag (True), --flag=false,
    --flag True."""
    import argparse

    def true_or_false(text):
        if text.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{text!r} is not True or False")
        return text.lower() == "true"
    parser.add_argument(name, type=true_or_false, nargs="?", const=True, default=default,
                        metavar="True|False", help=help)


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
