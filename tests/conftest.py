"""What the tests share: running the scripts, the one-line error check, stand-in texts, tiny models, a prepared
dataset with a finished run, a compacted-vocabulary dataset and fake WikiText-2 and WikiText-103 hosts. CPU only, no
network beyond 127.0.0.1.

    python -m pytest -q -n auto --maxprocesses=4   # everything, up to 4 processes (about 10 minutes on 2 cores)
    python -m pytest -q tests/test_train.py        # one file of the project

Each test_X.py is about X.py (test_configs.py: the config/ files; test_study.py and test_bench.py: lab/); a test
module imports its helpers from here (tiny_model from test_model.py, the model's specification at the top level),
never from another test module.
"""
import glob
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
sys.path.insert(0, ROOT)  # the project's modules, whichever folder pytest runs from
import prepare_wikipedia as pw  # noqa: E402
from test_model import tiny_model  # noqa: E402, F401  (test_model.py, the model's specification, owns it)
# one thread per script run: the machine has two cores; PYTHONPATH: the scripts import each other from any folder
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}


def config_files(pattern="*"):
    """Every config file whose name matches pattern, in config/ and lab/config/."""
    return sorted(glob.glob(os.path.join(ROOT, "config", f"{pattern}.py"))
                  + glob.glob(os.path.join(ROOT, "lab", "config", f"{pattern}.py")))


def config_path(name):
    """config/<name>.py, or lab/config/<name>.py for a config only the studies use."""
    path = os.path.join(ROOT, "config", f"{name}.py")
    return path if os.path.exists(path) else os.path.join(ROOT, "lab", "config", f"{name}.py")


def stops_at_their_defaults(ignored=()):
    """A Popen preexec_fn: the child starts with SIGINT, SIGTERM and SIGHUP as a terminal starts it, whatever the test
    run inherited (a CI job started with nohup ignores SIGHUP, and its children with it), then `ignored` ignored."""
    def preexec():
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else signal.SIG_DFL)
    return preexec


@pytest.fixture
def ctrl_c_works():
    """For a test that presses Ctrl-C in its own process: SIGINT raises KeyboardInterrupt, whatever the test run
    inherited (a job started in the background ignores SIGINT), and is set back as it was afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def run(script, *args, cwd, check=True, timeout=300, env=None):
    """Run ROOT/script with args in cwd; check: it must succeed. env: variables added to ENV."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=cwd, env={**ENV, **(env or {})},
                            capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@contextmanager
def holding(folder, command, cwd):
    """A process that holds folder (relative to cwd) alone, as prepare_wikipedia.py does, its note naming command;
    yields it once it holds, and lets it end on leaving."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from machinery import files; "
                               "files.hold_folder(sys.argv[1], '--name', sys.argv[2]); "
                               "print('held', flush=True); sys.stdin.read()", folder, command],
                              cwd=cwd, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.communicate("")


def raising_at(module, name, error, script, *args, cwd):
    """Run ROOT/script with args in cwd, with error (Python source, e.g. "MemoryError()") raised when it calls
    module.name: a fault at a chosen point, with no race."""
    code = (f"import runpy, sys, torch, {module}\n"
            f"def fault(*args, **kwargs):\n    raise {error}\n"
            f"{module}.{name} = fault\n"
            f"sys.argv = [{script!r}, *{list(args)!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, script)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def interrupted_at(module, name, script, *args, cwd):
    """Run ROOT/script with args in cwd, with Ctrl-C (KeyboardInterrupt) raised when it calls module.name: an
    interrupt at a chosen point, with no race."""
    return raising_at(module, name, "KeyboardInterrupt", script, *args, cwd=cwd)


def killed_write(path):
    """The temporary file machinery.files.write_atomic leaves beside path when its process dies in the middle
    (kill -9)."""
    before = set(os.listdir(os.path.dirname(path)))
    subprocess.run([sys.executable, "-c", "import os, sys; from machinery import files; "
                    "files.write_atomic(sys.argv[1], lambda f: (f.write(b'half'), f.flush(), os._exit(9)))", str(path)],
                   env=ENV)
    [left] = set(os.listdir(os.path.dirname(path))) - before
    return left


def kill_all(*pids):
    """SIGKILL each of pids still alive: nothing a test started outlives it."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # ended
            pass


def assert_interrupted(result, *fragments):
    """Ctrl-C: a non-zero exit and one line, `interrupted...`, holding each fragment; no traceback."""
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def assert_one_line_error(error, *fragments):
    """How every script stops on bad input: one line `error: ...` holding each fragment, and no traceback.
    error: a finished process (then its exit status must be 1, and the line is its stderr), or the text itself
    (stderr, or str(SystemExit.code) of a call in this process)."""
    if isinstance(error, subprocess.CompletedProcess):
        assert error.returncode == 1, (error.returncode, error.stderr)
        error = error.stderr
    assert "Traceback" not in error, error
    lines = error.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), error
    for fragment in fragments:
        assert fragment in lines[0], lines[0]

# -----------------------------------------------------------------------------
# stand-in texts


ASCII_WORDS = ["the", "river", "castle", "was", "built", "in", "a", "year", "by", "king", "of", "north", "and", "its",
               "walls"]
WORDS = ASCII_WORDS + ["naïve", "café", "1846", "—", "Zürich"]


def word_articles(words, n_articles, n_words):
    """WikiText-style text: n_articles articles ' = Article i = ' of n_words words drawn from `words` (seed 0)."""
    rng = np.random.default_rng(0)
    return "".join(f" = Article {i} = \n\n " + " ".join(rng.choice(words, size=n_words)) + " .\n"
                   for i in range(n_articles))


def make_wikitext(path, num_articles=12):
    """A small WikiText-style file with sections and subsections; returns the titles."""
    titles = [f"Topic {i} ( {['river', 'song', 'ship'][i % 3]} )" for i in range(num_articles)]
    with open(path, "w", encoding="utf-8") as f:
        for i, title in enumerate(titles):
            f.write(f" \n = {title} = \n \n {title} is the subject number {i} of this text . \n \n")
            f.write(f" = = History = = \n \n It was first seen in 19{i:02d} . \n \n")
            f.write(f" = = = Later years = = = \n \n Nothing = else happened to topic {i} . \n \n")
    return titles

# -----------------------------------------------------------------------------
# a prepared byte-level dataset and a finished run: train.py, sample.py, data.py and configurator.py tests


TINY = ["--dataset=tiny", "--variant=encdec", "--n_layer=1", "--n_embed=32", "--n_head=2", "--context_size=32",
        "--batch_size=4", "--gradient_accumulation_steps=2", "--eval_interval=2", "--eval_iters=2", "--log_interval=1",
        "--warmup_iters=2", "--lr_decay_iters=8", "--learning_rate=3e-3", "--device=cpu"]


def train(cwd, out_dir, *args, check=True, timeout=300, env=None):
    """train.py on data/tiny with the TINY settings, into out_dir; later args win. env: variables added to ENV."""
    return run("train.py", *TINY, f"--out_dir={out_dir}", *args, cwd=cwd, check=check, timeout=timeout, env=env)


def log(cwd, out_dir):
    with open(os.path.join(cwd, out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A folder with data/tiny (prepared by prepare_wikipedia.py) and one finished 6-iteration run in out_full.
    Shared by the whole session: a test adds only files and run folders of its own (out_<name>), or works on a
    copy (copy_run); none changes data/tiny or out_full."""
    root = tmp_path_factory.mktemp("train")
    (root / "text.txt").write_text(word_articles(ASCII_WORDS, 20, 150))
    run("prepare_wikipedia.py", "--input", "text.txt", "--name", "tiny", "--tokenizer", "byte", "--val_fraction",
        "0.1", cwd=root)
    train(root, "out_full", "--max_iters=6")
    return root


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(name, kilobytes, read_only=False): a folder of tmp_path on a tmpfs of that size, a real small (or
    read-only) disk. Mounting needs root: elsewhere the test is skipped, saying so."""
    mounts = []

    def make(name, kilobytes, read_only=False):
        folder = tmp_path / name
        folder.mkdir()
        options = f"size={kilobytes}k" + ",ro" * read_only
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
        if mount.returncode:
            pytest.skip("cannot mount a small tmpfs here (it needs root), so a real full disk is not tried")
        mounts.append(folder)
        return folder
    yield make
    for folder in mounts:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder, leave=0):
    """Fill the disk holding folder, leaving about `leave` bytes free."""
    free = shutil.disk_usage(folder).free - leave
    (folder / "filler").write_bytes(b"\0" * max(0, free - free % 4096))


def copy_run(workdir, tmp_path, name="out"):
    """tmp_path with data/tiny and a copy of the finished 6-iteration run in tmp_path/name."""
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    shutil.copytree(workdir / "out_full", tmp_path / name)
    return tmp_path / name

# -----------------------------------------------------------------------------
# a compacted GPT-2 vocabulary: data.py and evaluate.py tests


@pytest.fixture(scope="session")
def compact(tmp_path_factory):
    """data/small prepared with --tokenizer gpt2 --compact_vocab from a generated WikiText-style text."""
    root = tmp_path_factory.mktemp("compact")
    (root / "text.txt").write_text(word_articles(WORDS, 12, 120), encoding="utf-8")
    pw.main(["--input", str(root / "text.txt"), "--tokenizer", "gpt2", "--compact_vocab", "--min_chars", "0",
             "--val_fraction", "0.25", "--out_dir", str(root / "data"), "--name", "small"])
    return root


COMPACT_RUN = ["--dataset=small", "--variant=encdec", "--n_layer=1", "--n_embed=16", "--n_head=2", "--context_size=32",
               "--batch_size=4", "--gradient_accumulation_steps=1", "--max_iters=4", "--eval_interval=2",
               "--eval_iters=0", "--log_interval=1", "--device=cpu", "--out_dir=run"]


@pytest.fixture(scope="session")
def trained(compact):
    """The compact folder with a finished 4-iteration run on data/small in run/: evaluate.py and sample.py tests."""
    run("train.py", *COMPACT_RUN, cwd=compact)
    return compact

@pytest.fixture(scope="session")
def reversal_run(tmp_path_factory):
    """A folder with a finished 4-iteration tiny reversal run in rev/: evaluate.py and sample.py tests."""
    root = tmp_path_factory.mktemp("reversal")
    run("train.py", "--dataset=reversal", "--n_layer=1", "--n_embed=16", "--n_head=2", "--max_iters=4",
        "--eval_interval=2", "--device=cpu", "--out_dir=rev", cwd=root)
    return root

# -----------------------------------------------------------------------------
# a fake host of the WikiText-2 files: prepare_wikipedia.py and data.py tests


class FileHandler(BaseHTTPRequestHandler):
    """A fake raw-file host: serves `files`, honours Range, for the paths in `cut` sends only the first half of the
    body once before hanging up, and answers the first requests with the (status, Retry-After) of `faults`."""
    files, cut, ranges, ignore_range, faults = {}, set(), [], False, []

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        self.ranges.append((name, self.headers.get("Range")))
        if self.faults:
            status, retry_after = self.faults.pop(0)
            self.send_response(status)
            self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if name not in self.files:
            self.send_error(404)
            return
        data, start = self.files[name], 0
        if self.headers.get("Range") and not self.ignore_range:
            start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
            if start >= len(data):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if name in self.cut:
            self.cut.discard(name)
            self.wfile.write(data[start:start + (len(data) - start) // 2])
            self.close_connection = True
        else:
            self.wfile.write(data[start:])

    def log_message(self, *args):
        pass


def wikitext(seed):
    text = "".join(f" \n = Topic {seed} {i} = \n \n" + f" Sentence {i} of file {seed} . \n" * 3 for i in range(8))
    return text.encode("utf-8")


@pytest.fixture
def wikitext2_host(monkeypatch):
    """A fake host of train.txt, valid.txt, test.txt, with the checksums of these files patched in; a failed
    request is tried again at once."""
    monkeypatch.setattr(pw, "RETRY", pw.RETRY.new(backoff_factor=0))
    files = {"train.txt": wikitext(0), "valid.txt": wikitext(1), "test.txt": wikitext(2)}
    monkeypatch.setattr(pw, "WIKITEXT2_FILES", {
        "train": ("train.txt", "git-blob",
                  hashlib.sha1(b"blob %d\0" % len(files["train.txt"]) + files["train.txt"]).hexdigest()),
        "valid": ("valid.txt", "sha256", hashlib.sha256(files["valid.txt"]).hexdigest()),
        "test": ("test.txt", "sha256", hashlib.sha256(files["test.txt"]).hexdigest())})
    handler = type("Handler", (FileHandler,), {"files": files, "cut": set(), "ranges": [], "faults": []})
    server = serve(handler)
    handler.url = f"http://127.0.0.1:{server.server_port}/examples/wikitext-2/"
    yield handler
    server.shutdown()
    server.server_close()


def prepare_wikitext2(host, tmp_path, *extra):
    """prepare_wikipedia.main from the fake host into tmp_path, byte tokens, every article kept."""
    pw.main(["--wikitext2_url", host.url, "--min_chars", "0", "--tokenizer", "byte", "--out_dir", str(tmp_path),
             *extra])


def serve(handler):
    """Serve the FileHandler subclass on 127.0.0.1 in a thread; returns the server (shut it down after)."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server

# -----------------------------------------------------------------------------
# a fake host of WikiText-103's Parquet files: prepare_wikipedia.py and data.py tests


def wikitext103_lines(n_articles=40):
    """WikiText-103 raw text as the hub's Parquet rows hold it: one line per row with its newline, empty rows
    between; article i has 20 + 15 * (i % 7) words and a section."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n_articles):
        words = " ".join(rng.choice(ASCII_WORDS, size=20 + 15 * (i % 7)))
        lines += ["", f" = Article {i} = \n", "", f" {words} . \n", "", " = = Later = = \n", "",
                  f" Article {i} ends . \n"]
    return lines


def parquet_bytes(lines):
    import pyarrow as pa
    import pyarrow.parquet as pq
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": lines}), buffer)
    return buffer.getvalue()


@pytest.fixture
def wikitext103_host(monkeypatch):
    """A fake hub with WikiText-103's two train shards (the cut between them inside an article), their sha256s
    patched in; host.lines: the text's rows in order. A failed request is tried again at once."""
    monkeypatch.setattr(pw, "RETRY", pw.RETRY.new(backoff_factor=0))
    lines = wikitext103_lines()
    cut = len(lines) // 2 + 3  # inside an article
    names = list(pw.WIKITEXT103_FILES)
    files = {names[0]: parquet_bytes(lines[:cut]), names[1]: parquet_bytes(lines[cut:])}
    monkeypatch.setattr(pw, "WIKITEXT103_FILES", {name: hashlib.sha256(files[name]).hexdigest() for name in names})
    handler = type("Handler", (FileHandler,), {"files": files, "cut": set(), "ranges": [], "faults": [],
                                               "lines": lines})
    server = serve(handler)
    handler.url = f"http://127.0.0.1:{server.server_port}/datasets/wikitext/resolve/0/wikitext-103-raw-v1/"
    yield handler
    server.shutdown()
    server.server_close()
