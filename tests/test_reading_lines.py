"""Specifications of lab/reading_lines.py, the measure of how many lines a reader meets following one run: a file the
run imports counts whole, less every function and class none of whose lines ran; a function that ran counts whole,
its nested functions too.

    python -m pytest -q tests/test_reading_lines.py
"""
import sys

from lab import reading_lines

MODULE = '''"""A module."""
import os


def used(x):
    def hook():  # a nested function that never ran, in one that did: still read
        return 0
    if x:
        return 1
    return 2  # an untaken branch of a function that ran: still read


def unused():
    a = 1
    return a


class Thing:
    size = 3

    def called(self):
        return self.size

    @staticmethod
    def never():
        return 0


class NeverBuilt:
    pass
'''
SCRIPT = '''import helper

helper.used(True)
helper.Thing().called()
'''


def traced(tmp_path, monkeypatch):
    (tmp_path / "helper.py").write_text(MODULE)
    (tmp_path / "run.py").write_text(SCRIPT)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "ignored.py").write_text("x = 1\n")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "helper", raising=False)
    ran = reading_lines.trace_run(str(tmp_path / "run.py"), [], root=str(tmp_path))
    sys.settrace(None)
    return reading_lines.count(ran, root=str(tmp_path))


def test_a_function_that_never_ran_is_left_out_whole_and_one_that_ran_counts_whole(tmp_path, monkeypatch):
    counts = traced(tmp_path, monkeypatch)
    lines = MODULE.count("\n")
    unused = 3  # def unused, a = 1, return a
    never = 3  # @staticmethod, def never, return 0
    # NeverBuilt's body runs when the module loads (a class statement), so it counts
    assert counts["helper.py"] == lines - unused - never
    assert counts["run.py"] == SCRIPT.count("\n")


def test_files_outside_the_run_and_the_tests_do_not_count(tmp_path, monkeypatch):
    counts = traced(tmp_path, monkeypatch)
    assert set(counts) == {"helper.py", "run.py"}
