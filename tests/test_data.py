"""Specifications of data.py: the tokenizers and the compacted vocabulary, split_wikitext, the command that
prepares a missing dataset, the checks that a dataset is whole (check_dataset, as train.py runs them at start), and
the log and file writers (read_log, write_atomic). CPU only, no network beyond 127.0.0.1.

    python -m pytest -q tests/test_data.py
"""
import ast
import errno
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from text import get_tokenizer, gpt2_encoding, split_wikitext
import data
from machinery import checkpoints, files
import prepare_wikipedia as pw
from model import ModelConfig, build_model
from conftest import (ROOT, assert_one_line_error, copy_run, killed_write, log, make_wikitext, prepare_wikitext2, run,
                      train)

# -----------------------------------------------------------------------------
# tokenizers


def test_gpt2_tokenizer_builds_offline_with_known_gpt2_ids(tmp_path, monkeypatch):
    import requests
    import tiktoken

    def no_network(*args, **kwargs):
        raise AssertionError("the GPT-2 tokenizer must not need the network")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr(tiktoken, "get_encoding", no_network)
    monkeypatch.setattr(requests, "get", no_network)
    gpt2_encoding.cache_clear()
    try:
        encode, decode, vocab_size, eot_token = get_tokenizer("gpt2")
    finally:
        gpt2_encoding.cache_clear()
    assert (vocab_size, eot_token) == (50257, 50256)
    assert encode("Hello world") == [15496, 995]
    assert encode("Hello, world!") == [15496, 11, 995, 0]
    assert eot_token not in encode("a literal <|endoftext|> is text")
    text = "Zürich — 東京 🙂 <unk> @-@ 1 @.@ 5"
    assert decode(encode(text)) == text
    assert decode(np.array(encode(text), dtype=np.uint16)) == text  # as read back from a .bin


def test_byte_tokenizer_round_trips_utf8_and_separates_articles_with_nul():
    encode, decode, vocab_size, eot_token = get_tokenizer("byte")
    text = "Zürich — 東京 🙂"
    assert encode(text) == list(text.encode("utf-8"))
    assert decode(encode(text)) == text
    assert decode(np.array(encode(text), dtype=np.uint16)) == text
    assert (vocab_size, eot_token) == (256, 0)


def test_unknown_tokenizer_is_one_line_error_naming_the_choices(tmp_path):
    result = run("prepare_wikipedia.py", "--tokenizer", "bpe", "--input", "nothing.txt", "--out_dir", str(tmp_path),
                 cwd=tmp_path, check=False, timeout=60)
    assert_one_line_error(result, "unknown tokenizer 'bpe'", "gpt2", "byte")


def test_compact_vocabulary_keeps_gpt2_segmentation_with_dense_ids(compact):
    meta = json.load(open(compact / "data" / "small" / "meta.json"))
    full_encode, _, _, full_eot = get_tokenizer("gpt2")
    encode, decode, vocab_size, eot = get_tokenizer("gpt2", meta["compact_vocab"])
    ids = np.concatenate([np.fromfile(compact / "data" / "small" / f"{s}.bin", dtype=np.uint16)
                          for s in ("train", "val")])
    assert vocab_size == meta["vocab_size"] == len(set(ids.tolist())) and ids.max() == vocab_size - 1
    assert eot == meta["eot_token"] and meta["compact_vocab"][eot] == full_eot
    texts = [a["text"] for a in pw.read_input([str(compact / "text.txt")])]
    for text in texts:
        assert [meta["compact_vocab"][i] for i in encode(text)] == full_encode(text)  # the same tokens, renumbered
        assert decode(encode(text)) == text
    assert sorted(meta["compact_vocab"]) == meta["compact_vocab"]


def test_text_outside_the_compact_vocabulary_is_one_clear_error(compact):
    meta = json.load(open(compact / "data" / "small" / "meta.json"))
    encode = get_tokenizer("gpt2", meta["compact_vocab"])[0]
    with pytest.raises(SystemExit, match="outside this dataset's compact vocabulary"):
        encode("quantum chromodynamics")

# -----------------------------------------------------------------------------
# WikiText-style text, and the command that prepares a dataset


def test_wikitext_splits_at_top_level_titles_only(tmp_path):
    titles = make_wikitext(tmp_path / "small.txt")
    articles = split_wikitext((tmp_path / "small.txt").read_text(encoding="utf-8"), "small.txt")
    assert [a["title"] for a in articles] == titles
    for a in articles:
        assert a["text"].startswith(f"= {a['title']} =") and "= = History = =" in a["text"]
        assert a["text"].count("Nothing = else") == 1
    assert split_wikitext("Just one plain text.\n\nNo titles.\n", "plain.txt") == [
        {"title": "plain.txt", "text": "Just one plain text.\n\nNo titles."}]


@pytest.mark.parametrize("dataset", ["wikitext2_valid_byte", "wikitext2_test_gpt2", "wikitext2_valid_gpt2c",
                                     "wikitext2_valid-test_gpt2c"])
def test_prepare_command_of_a_wikitext2_dataset_builds_that_dataset(wikitext2_host, tmp_path, dataset):
    command = data.prepare_command(dataset).split()
    assert command[:2] == ["python", "prepare_wikipedia.py"]
    prepare_wikitext2(wikitext2_host, tmp_path, *command[2:])
    assert sorted(os.listdir(tmp_path / dataset)) == ["meta.json", "train.bin", "val.bin"]


@pytest.mark.parametrize("dataset", ["wikitext103_1000-300", "wikitext103_1000-300_byte", "wikitext103_1000-300c"])
def test_prepare_command_of_a_wikitext103_dataset_builds_that_dataset(wikitext103_host, tmp_path, dataset):
    command = data.prepare_command(dataset).split()
    assert command[:3] == ["python", "prepare_wikipedia.py", "--wikitext103"]
    pw.main([*command[2:], "--wikitext103_url", wikitext103_host.url, "--min_chars", "0", "--out_dir", str(tmp_path)])
    assert sorted(os.listdir(tmp_path / dataset)) == ["meta.json", "train.bin", "val.bin"]
    assert data.prepare_command("wikitext103") == "python prepare_wikipedia.py --wikitext103"  # the write-up's size

@pytest.mark.parametrize("dataset", ["wikitext2_valid_gpt2c", "wikitext2_valid-test_gpt2c", "wikitext2_all_byte"])
def test_offline_prepare_command_builds_from_local_copies_the_dataset_the_download_builds(wikitext2_host, tmp_path,
                                                                                         dataset):
    copies = tmp_path / "copies"
    copies.mkdir()
    for name, body in wikitext2_host.files.items():
        (copies / name).write_bytes(body)
    offline = data.prepare_command(dataset, offline=True).replace("PATH", str(copies)).split()
    prepare_wikitext2(wikitext2_host, tmp_path / "offline", *offline[2:])
    assert wikitext2_host.ranges == []  # nothing downloaded
    prepare_wikitext2(wikitext2_host, tmp_path / "online", *data.prepare_command(dataset).split()[2:])
    for f in ("train.bin", "val.bin"):
        assert (tmp_path / "offline" / dataset / f).read_bytes() == (tmp_path / "online" / dataset / f).read_bytes()

# -----------------------------------------------------------------------------
# check_dataset: a missing or broken dataset is refused when train.py starts, naming the command that rebuilds it


def test_missing_dataset_says_how_to_prepare_it(workdir):
    result = train(workdir, "out_err", "--dataset=nope", check=False)
    assert_one_line_error(result, "data/nope", "prepare_wikipedia.py", "reversal")


def test_missing_dataset_names_the_datasets_data_holds(workdir, tmp_path):
    """"dataset not found" repeated itself without saying which datasets there are."""
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    assert_one_line_error(train(tmp_path, "out", "--dataset=tine", check=False), "(data/ holds tiny)",
                          "or try a task that needs no data: --dataset=reversal")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(train(tmp_path / "empty", "out", check=False), "(data/ holds no dataset)")


def test_missing_dataset_hint_prepares_the_tokens_the_config_needs(workdir):
    result = run("train.py", os.path.join(ROOT, "config", "cpu_baseline.py"), "--dataset=nope", cwd=workdir,
                 check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --input PATH --name=nope --tokenizer=byte`")  # 256
    result = run("train.py", "--dataset=nope", cwd=workdir, check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --input PATH --name=nope`")  # GPT-2 tokens, the default
    result = run("train.py", "--dataset=wikitext2_valid_byte", "--vocab_size=256", cwd=workdir, check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte")
    result = run("train.py", os.path.join(ROOT, "config", "cpu_gpt2_baseline.py"), cwd=workdir, check=False)
    assert_one_line_error(result, "data/wikitext2_valid_gpt2c", "`python prepare_wikipedia.py --wikitext2=valid "
                          "--tokenizer=gpt2 --compact_vocab` (it downloads; offline, from your copy of the files: "
                          "`python prepare_wikipedia.py --wikitext2=valid --tokenizer=gpt2 --compact_vocab --input "
                          "PATH/valid.txt`)")


def break_val_ids(folder):
    ids = np.fromfile(folder / "val.bin", dtype=np.uint16)
    ids[len(ids) // 2] = 300  # the byte vocabulary has 256
    ids.tofile(folder / "val.bin")


def cut_train_in_half(folder):
    tokens = (folder / "train.bin").read_bytes()
    (folder / "train.bin").write_bytes(tokens[:len(tokens) // 4 * 2])


def change_one_train_token(folder):
    ids = np.fromfile(folder / "train.bin", dtype=np.uint16)
    ids[len(ids) // 2] = (ids[len(ids) // 2] + 1) % 256  # same size, still in the vocabulary
    ids.tofile(folder / "train.bin")


def swap_two_train_tokens(folder):
    """The same size and the same sum: only a hash of the bytes tells."""
    ids = np.fromfile(folder / "train.bin", dtype=np.uint16)
    i = int(np.argmax(ids != ids[0]))
    ids[0], ids[i] = ids[i], ids[0]
    ids.tofile(folder / "train.bin")


def null_counts_and_cut(folder):
    """meta.json's train_tokens, train_token_sum and train_sha256 set to null, and train.bin cut short."""
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps(dict(meta, train_tokens=None, train_token_sum=None,
                                                      train_sha256=None)))
    (folder / "train.bin").write_bytes((folder / "train.bin").read_bytes()[:-200])


def write_meta(folder, **changes):
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({k: v for k, v in {**meta, **changes}.items() if v is not None}))


@pytest.mark.parametrize("breaks, fragments", [
    (break_val_ids, ["val.bin holds token 300", "vocab_size=256", "--tokenizer=byte"]),
    (cut_train_in_half, ["train.bin", "train_tokens", "--tokenizer=byte"]),
    (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes()[:-1]),
     ["train.bin", "train_tokens=", "cut short"]),
    (lambda d: (d / "meta.json").write_text('{"vocab_size": 256,'), ["meta.json"]),
    (lambda d: (d / "meta.json").write_text("[256]"), ["meta.json"]),
    (lambda d: write_meta(d, vocab_size=None), ["meta.json", "vocab_size"]),
    (lambda d: (write_meta(d, val_tokens=0), (d / "val.bin").write_bytes(b"")),
     ["val.bin", "has 0 tokens", "--val_fraction 0.05"]),
    (change_one_train_token, ["train.bin", "train_token_sum differs", "different preparations"]),
    (lambda d: write_meta(d, val_tokens="many"), ["val.bin", "val_tokens='many'"]),
    (lambda d: write_meta(d, tokenizer=["byte"]), ["meta.json", "tokenizer (gpt2 or byte)"]),
    (lambda d: write_meta(d, train_token_sum="x"), ["train.bin", "train_token_sum differs"]),
    (swap_two_train_tokens, ["train.bin", "train_sha256 differs", "a damaged file"]),
    (null_counts_and_cut, ["train.bin", "train_tokens=None"]),
    (lambda d: write_meta(d, vocab_size=40), ["train.bin holds token", "not below vocab_size=40"]),
    (lambda d: write_meta(d, vocab_size=10 ** 9), ["meta.json", "vocab_size of 1 to 65536"]),
    (lambda d: (d / "meta.json").write_text("[" * 100_000 + "]" * 100_000), ["meta.json"]),
], ids=["id_beyond_vocab", "train_cut_in_half", "odd_bytes", "meta_not_json", "meta_not_object", "meta_without_vocab",
        "no_val_split", "another_preparation", "val_tokens_a_string", "tokenizer_a_list", "token_sum_a_string",
        "two_tokens_swapped", "counts_null_and_cut", "vocab_below_the_ids", "vocab_past_16_bits", "meta_nested_deep"])
def test_broken_dataset_is_refused_at_start_naming_the_file_and_the_rebuild(workdir, tmp_path, breaks, fragments):
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    breaks(tmp_path / "data" / "tiny")
    result = train(tmp_path, "out", "--max_iters=2", check=False)
    assert_one_line_error(result, *fragments, "prepare_wikipedia.py --input PATH --name=tiny")
    assert not os.path.exists(tmp_path / "out")

# -----------------------------------------------------------------------------
# log.jsonl at a resume: written from the log the checkpoint carries; one that differs is set aside whole


@pytest.mark.parametrize("change", [
    lambda lines: lines + ['{"iter": 8, "train_lo'],  # a line torn by a full disk
    lambda lines: lines[:1] + ["garbage\n"] + lines[1:],  # a broken line
    lambda lines: lines + ['{"note": "lr looked high here"}\n'],  # a note of the user's
    lambda lines: lines + ['{"iter": "eight"}\n'],  # a record of another kind
], ids=["torn_line", "broken_line", "users_note", "iter_a_string"])
def test_a_resume_sets_a_log_that_differs_from_the_checkpoints_aside_whole_and_writes_the_checkpoints(
        workdir, tmp_path, change):
    out = copy_run(workdir, tmp_path)
    lines = (out / "log.jsonl").read_text().splitlines(keepends=True)
    changed = "".join(change(lines))
    (out / "log.jsonl").write_text(changed)
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert f"out{os.sep}log.jsonl: set aside whole as out{os.sep}log.jsonl.aside1" in result.stdout
    assert (out / "log.jsonl.aside1").read_text() == changed  # nothing of it lost
    assert (out / "log.jsonl").read_text().startswith("".join(lines))
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4, 6, 8]


def test_a_log_that_is_a_folder_is_set_aside_and_written_again(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    lines = (out / "log.jsonl").read_text()
    (out / "log.jsonl").unlink()
    (out / "log.jsonl").mkdir()
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert (out / "log.jsonl.aside1").is_dir() and (out / "log.jsonl").read_text().startswith(lines)

# -----------------------------------------------------------------------------
# write_atomic: a file is replaced whole, or not at all (train.py's full-disk tests: test_train.py)


def test_write_atomic_replaces_the_file_whole_or_keeps_the_previous_one(tmp_path):
    path = str(tmp_path / "ckpt.pt")
    files.write_atomic(path, b"first")
    files.write_atomic(path, lambda f: f.write(b"second"))  # or a function of the open file
    assert (tmp_path / "ckpt.pt").read_bytes() == b"second" and os.listdir(tmp_path) == ["ckpt.pt"]

    def full_disk(f):
        f.write(b"half of the th")
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(SystemExit) as exit:
        files.write_atomic(path, full_disk)
    assert_one_line_error(str(exit.value.code), f"could not write {path}: No space left on device in {tmp_path}")
    assert (tmp_path / "ckpt.pt").read_bytes() == b"second" and os.listdir(tmp_path) == ["ckpt.pt"]
    with pytest.raises(SystemExit) as exit:  # the line may say what is kept, and how to go on
        files.write_atomic(path, full_disk, "; the checkpoint is kept")
    assert str(exit.value.code).endswith("or write elsewhere; the checkpoint is kept")

    def interrupted(f):
        f.write(b"half")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is not an error to report: it goes on up
        files.write_atomic(path, interrupted)
    assert (tmp_path / "ckpt.pt").read_bytes() == b"second" and os.listdir(tmp_path) == ["ckpt.pt"]


def test_the_temporary_file_of_a_killed_write_is_the_one_the_next_write_of_that_file_replaces(workdir, tmp_path):
    out = tmp_path / "data" / "tiny"
    out.mkdir(parents=True)
    left = killed_write(out / "train.bin.new")  # prepare writes each file as .new, then renames them all
    for name in ("notes.tmp", "train.bin.tmp", "draft.partial"):  # the user's files
        (out / name).write_text("mine")
    run("prepare_wikipedia.py", "--input", str(workdir / "text.txt"), "--name", "tiny", "--tokenizer", "byte",
        "--out_dir", str(tmp_path / "data"), cwd=tmp_path)
    assert left == "train.bin.new.partial" and not (out / left).exists()
    assert all((out / name).read_text() == "mine" for name in ("notes.tmp", "train.bin.tmp", "draft.partial"))

# -----------------------------------------------------------------------------
# folders: making one for a run, holding it (train.py's tests of a second process: test_train.py)


@pytest.mark.parametrize("error", [errno.ENOLCK, errno.EOPNOTSUPP])  # NFS without its lock service; no locks at all
def test_a_folder_on_a_file_system_without_locks_is_refused_in_one_line(tmp_path, monkeypatch, error):
    def flock(fd, operation):
        raise OSError(error, os.strerror(error))
    # filelock, which holds the folder, calls fcntl.flock
    monkeypatch.setattr(pytest.importorskip("fcntl"), "flock", flock)
    with pytest.raises(SystemExit) as exit:
        files.hold_folder(str(tmp_path), "--out_dir", "test")
    assert_one_line_error(str(exit.value.code), f"{tmp_path} cannot be locked ({os.strerror(error)}",
                          "another --out_dir on a file system with locks")


def test_a_lock_file_that_is_a_folder_is_refused_in_one_line_and_an_overwrite_deletes_nothing(workdir, tmp_path):
    """A folder where the lock goes (left by anything): the run went on unguarded, and a second run with
    --overwrite=True then deleted the first run's checkpoint under it."""
    out = copy_run(workdir, tmp_path)
    (out / ".held").mkdir()
    before = {name: (out / name).read_bytes() for name in ("ckpt.pt", "log.jsonl")}
    result = train(tmp_path, "out", "--overwrite=True", check=False)
    assert_one_line_error(result, "out cannot be locked", ".held", "remove what is in the way")
    assert {name: (out / name).read_bytes() for name in ("ckpt.pt", "log.jsonl")} == before


def test_a_refusal_names_the_holder_of_the_lock_not_the_note_of_a_killed_process(workdir, tmp_path):
    """The note of a process killed with kill -9 stays; only the note beside the lock that is held is named."""
    folder = tmp_path / "data" / "tiny"
    folder.mkdir(parents=True)
    (folder / ".lock.999999").write_text("pid 999999 (train.py --dataset=tiny, since 2020-01-01 00:00:00)\n")
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from machinery import files; "
                               "files.hold_folder(sys.argv[1], '--dataset', 'train.py --dataset=tiny', shared=True); "
                               "print('held', flush=True); sys.stdin.read()", str(folder)],
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit) as exit:
            files.hold_folder(str(folder), "--name", "prepare")
    finally:
        holder.communicate("")
    assert_one_line_error(str(exit.value.code), f"is in use by pid {holder.pid} (train.py --dataset=tiny")
    assert "999999" not in str(exit.value.code)


# -----------------------------------------------------------------------------
# a checkpoint, loaded in someone else's code (the README's lines)

LOAD_WITH_MODEL_PY_ONLY = """
import torch
from model import ModelConfig, build_model
checkpoint = torch.load("{run}/ckpt.pt", map_location="cpu", weights_only=True)
model = build_model(ModelConfig(**checkpoint["model_config"])); model.load_state_dict(checkpoint["model"])
print(model.eval()(torch.tensor([[1, 2, 3]]))[0].flatten().tolist())
"""
LOAD_WITH_THE_PROJECT = """
import torch
from text import get_tokenizer  # noqa: E402
from machinery.checkpoints import load_checkpoint
from model import ModelConfig, build_model
checkpoint, model = load_checkpoint("{run}", build=lambda config: build_model(ModelConfig(**config)))
meta = checkpoint["dataset_meta"]
encode, decode, _, _ = get_tokenizer(meta["tokenizer"], meta.get("compact_vocab"))
print(decode(model.generate(torch.tensor([encode("the castle")]), 8, top_k=1)[0].tolist()))
"""


def build(config):
    return build_model(ModelConfig(**config))


def test_the_readme_lines_load_a_model_in_someone_elses_code(workdir, tmp_path):
    """With model.py alone beside it (no data/, nothing else of the project), and with the project on the path: the
    logits and the greedy text of the model that checkpoints.load_checkpoint gives."""
    shutil.copy(os.path.join(ROOT, "model.py"), tmp_path / "model.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = LOAD_WITH_MODEL_PY_ONLY.format(run=workdir / "out_full")
    alone = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    checkpoint, model = checkpoints.load_checkpoint(str(workdir / "out_full"), build=build)
    with torch.no_grad():
        assert json.loads(alone.stdout) == model(torch.tensor([[1, 2, 3]]))[0].flatten().tolist(), alone.stderr
    code = LOAD_WITH_THE_PROJECT.format(run=workdir / "out_full")
    greedy = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "..", env={**env, "PYTHONPATH": ROOT},
                            capture_output=True, text=True)
    sample = run("sample.py", "--out_dir=out_full", "--start=the castle", "--max_new_tokens=8", "--top_k=1",
                 "--num_samples=1", "--stop_at_eot=False", "--device=cpu", cwd=workdir)
    assert greedy.stdout == sample.stdout.split("-" * 40)[0] and greedy.stdout.startswith("the castle"), greedy.stderr


def test_every_torch_load_reads_data_only():
    """torch.load(..., weights_only=True), said explicitly: before torch 2.6 the default unpickles any object."""
    loads = []
    for path in glob.glob(os.path.join(ROOT, "*.py")) + glob.glob(os.path.join(ROOT, "*", "*.py")):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                loads.append((os.path.relpath(path, ROOT), node.lineno,
                              any(k.arg == "weights_only" and getattr(k.value, "value", None) is True
                                  for k in node.keywords)))
    assert len(loads) >= 4 and all(explicit for _, _, explicit in loads), loads
