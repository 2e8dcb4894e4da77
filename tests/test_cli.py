"""Specifications of the command line, one grammar for every script: --key=value and --key value, a boolean as a bare
--flag or --flag=True/False in any case, the same names for the same things, and --help giving every setting its
meaning. Each script runs in this process up to the point where it has read its arguments (configurator.configure
for train.py, argparse for the others), and stops there: no model, no data. CPU only, no network.

    python -m pytest -q tests/test_cli.py
"""
import argparse
import os
import runpy
import subprocess
import sys

import pytest

import configurator
from conftest import ENV, ROOT
from lab import study

SCRIPTS = ["train.py", "sample.py", "evaluate.py", "prepare_wikipedia.py", "lab/study.py", "lab/bench.py"]
# per script: a setting that takes a number, a boolean one, and the shared names it has
SETTINGS = {"train.py": ("batch_size", "compile", {"device", "dtype", "compile", "seed"}),
            "sample.py": ("num_samples", "stop_at_eot", {"device", "dtype", "seed"}),
            "evaluate.py": ("batch_size", "compile", {"device", "dtype", "compile"}),  # no randomness: no seed
            "prepare_wikipedia.py": ("seed", "compact_vocab", {"seed"}),
            "lab/study.py": ("jobs", "dry_run", set()),  # the others go to train.py
            "lab/bench.py": ("batch_size", "compile", {"device", "dtype", "compile"})}


class Parsed(Exception):
    """Raised where a script has read its arguments: its settings, and its argparse parser (None for train.py)."""

    def __init__(self, settings, parser=None):
        super().__init__()
        self.settings, self.parser = settings, parser


def parse(script, argv, monkeypatch):
    """Run ROOT/script with argv in this process until it has read them; returns Parsed, or raises its SystemExit."""
    real_configure, real_parser = configurator.configure, configurator.argument_parser

    def configure(settings, defaults, argv, *args, **kwargs):
        real_configure(settings, defaults, argv, *args, **kwargs)
        raise Parsed({key: settings[key] for key in defaults})

    def argument_parser(doc, command):
        parser = real_parser(doc, command)
        calls = []  # parse_args calls parse_known_args, then checks what is left
        for name in ("parse_args", "parse_known_args"):
            def stop(*args, real=getattr(parser, name), **kwargs):
                calls.append(name)
                namespace = real(*args, **kwargs)
                calls.pop()
                if calls:
                    return namespace
                raise Parsed(vars(namespace[0] if isinstance(namespace, tuple) else namespace), parser)
            setattr(parser, name, stop)
        return parser
    monkeypatch.setattr(configurator, "configure", configure)
    monkeypatch.setattr(configurator, "argument_parser", argument_parser)
    monkeypatch.setattr(sys, "argv", [script, *argv])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the scripts set their own
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        runpy.run_path(os.path.join(ROOT, script), run_name="__main__")
    except Parsed as parsed:
        return parsed
    pytest.fail(f"{script} did not read its arguments")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_gives_every_setting_its_meaning(script, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit:
        parse(script, ["--help"], monkeypatch)
    out = capsys.readouterr().out
    assert exit.value.code in (0, None) and "usage:" in out
    if script == "train.py":  # "  --key=default", then its meaning on the same line or, for a long one, the next
        lines = out.splitlines()
        shown = {line.split("=")[0].strip()[2:]: (line[41:] or lines[i + 1]).strip()
                 for i, line in enumerate(lines) if line.startswith("  --")}
        assert set(shown) == set(parse(script, [], monkeypatch).settings) and all(shown.values()), shown
    else:
        parser = parse(script, ["--out_dir=x"] * (script == "evaluate.py"), monkeypatch).parser
        options = [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]
        assert options and all(a.help and a.help.strip() for a in options), [a.dest for a in options if not a.help]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_reads_key_value_key_space_value_and_booleans_in_any_case(script, monkeypatch):
    number, flag, shared = SETTINGS[script]
    required = ["--out_dir=x"] * (script == "evaluate.py")
    for argv, want in [([f"--{number}=3"], {number: 3}), ([f"--{number}", "3"], {number: 3}),
                       ([f"--{flag}"], {flag: True}), ([f"--{flag}=True"], {flag: True}),
                       ([f"--{flag}=true"], {flag: True}), ([f"--{flag}", "TRUE"], {flag: True}),
                       ([f"--{flag}=False"], {flag: False}), ([f"--{flag}", "false"], {flag: False}),
                       ([f"--{flag}", f"--{number}", "3"], {flag: True, number: 3})]:
        settings = parse(script, [*required, *argv], monkeypatch).settings
        assert {key: settings[key] for key in want} == want, (argv, settings)
    assert shared <= set(parse(script, required, monkeypatch).settings)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_boolean_that_is_not_true_or_false_is_one_line_error(script, monkeypatch):
    flag = SETTINGS[script][1]
    with pytest.raises(SystemExit) as exit:
        parse(script, [f"--{flag}=yes", *["--out_dir=x"] * (script == "evaluate.py")], monkeypatch)
    message = str(exit.value.code)
    assert message.startswith("error: ") and "\n" not in message and "True or False" in message and flag in message


def test_the_settings_a_study_passes_to_train_py_take_the_same_grammar():
    assert study.parse_overrides(["--n_layer", "1", "--compile", "--dtype=float32", "--rotary", "true"]) == {
        "n_layer": 1, "compile": True, "dtype": "float32", "rotary": "true"}  # as train.py reads them
    assert list(configurator.split_args(["--n_layer", "1", "--compile", "--dtype=float32"])) == [
        ("n_layer", "1"), ("compile", "True"), ("dtype", "float32")]


@pytest.mark.parametrize("script, args", [(script, ["--help"]) for script in SCRIPTS] + [
    ("lab/study.py", ["--suite=byte", "--summary"]),
    ("sample.py", ["--out_dir=out_full", "--num_samples=40", "--max_new_tokens=300", "--device=cpu"]),
    ("evaluate.py", ["--out_dir=out_full", "--device=cpu"])],
    ids=[*SCRIPTS, "study_summary", "sample", "evaluate"])
def test_output_piped_into_a_reader_that_stopped_ends_quietly(workdir, script, args):
    """`python train.py -h | head -3`: the reader is gone before the script writes (here: a pipe whose reading end
    is closed), and the script ends without a BrokenPipeError, its traceback or "Exception ignored" (exit 120)."""
    reading, writing = os.pipe()
    os.close(reading)
    try:
        result = subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=workdir, env=ENV,
                                stdout=writing, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(writing)
    assert result.returncode in (0, 1), (result.returncode, result.stderr)
    assert not any(word in result.stderr for word in ("Traceback", "BrokenPipe", "Exception ignored")), result.stderr


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("word", ["yes", "no", "1", "0", "on"])
def test_a_boolean_flag_followed_by_a_word_that_is_not_true_or_false_names_the_flag(script, word, monkeypatch):
    """train.py --compile yes answered "config file 'yes' not found"."""
    flag = SETTINGS[script][1]
    with pytest.raises(SystemExit) as exit:
        parse(script, [f"--{flag}", word, *["--out_dir=x"] * (script == "evaluate.py")], monkeypatch)
    message = str(exit.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert f"--{flag}" in message and "True or False" in message and "config file" not in message, message


def unknown_flag_message(script, argv, monkeypatch):
    """The one line of script given argv (a study: from its main, which hands what it does not know to train.py)."""
    with pytest.raises(SystemExit) as exit:
        if script == "lab/study.py":
            study.main(["--summary=True", *argv])
        else:
            parse(script, [*["--out_dir=x"] * (script == "evaluate.py"), *argv], monkeypatch)
    message = str(exit.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


@pytest.mark.parametrize("script, typed, meant", [
    ("train.py", "--n_layr=2", "n_layer"), ("train.py", "--batch-size=2", "batch_size"),
    ("lab/study.py", "--sumary", "summary"), ("lab/study.py", "--n_layr=1", "n_layer")])
def test_an_unknown_setting_of_train_py_or_a_study_gets_a_did_you_mean(script, typed, meant, monkeypatch):
    message = unknown_flag_message(script, [typed], monkeypatch)
    key = typed[2:].split("=")[0]
    assert f"unknown config key '{key}' in the command line; did you mean '{meant}'?" in message, message


@pytest.mark.parametrize("script, typed", [
    ("sample.py", "--temprature=0.5"), ("sample.py", "--num-samples"), ("evaluate.py", "--batchsize=4"),
    ("prepare_wikipedia.py", "--tokeniser=byte"), ("lab/bench.py", "--decode_tokns=5"), ("sample.py", "stray")])
def test_an_unknown_flag_of_an_argparse_script_is_one_line_naming_it_and_the_help(script, typed, monkeypatch):
    message = unknown_flag_message(script, [typed], monkeypatch)
    assert f"unrecognized arguments: {typed} (see python " in message and "--help)" in message, message


@pytest.mark.parametrize("script", ["train.py", "lab/study.py"])
@pytest.mark.parametrize("argv", [["--"], ["--", "--seed=1"], ["-seed=1"], ["stray"]])
def test_an_argument_that_is_not_a_flag_is_named_as_typed(script, argv, monkeypatch):
    """A bare '--' gave "unknown config key ''"; `lab.study --summary -- --n_layer=1`, a value never typed ('True')."""
    if script == "train.py" and argv == ["stray"]:  # a config file here
        argv = ["stray.py"]
    message = unknown_flag_message(script, argv, monkeypatch)
    assert f"'{argv[0]}'" in message and "True" not in message and "''" not in message, message
    assert "--key=value" in message or "config file" in message, message


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "train.py"])
def test_help_shows_each_default_as_train_py_does(script, monkeypatch):
    """sample.py --help and evaluate.py --help hid their defaults; train.py --help shows them."""
    parser = parse(script, ["--out_dir=x"] * (script == "evaluate.py"), monkeypatch).parser
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.option_strings and action.default not in (None, argparse.SUPPRESS) and action.help:
            assert "default" in formatter._expand_help(action), (action.dest, formatter._expand_help(action))
    assert "(default: 0.8)" in parse("sample.py", [], monkeypatch).parser.format_help()
