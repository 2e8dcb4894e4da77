"""Specifications of evaluate.py: every token once, bits per byte, and the same figure as train.py's whole-split
evaluation (eval_iters=0). CPU only, no network. (The compacted GPT-2 vocabulary itself: test_data.py.)

    python -m pytest -q tests/test_evaluate.py
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from text import get_tokenizer
import data
import evaluate
import prepare_wikipedia as pw
from machinery import checkpoints
from model import ModelConfig, build_model
from tasks import reversal
from conftest import (ENV, ROOT, WORDS, assert_interrupted, assert_one_line_error, holding, interrupted_at, run,
                      tiny_model)


def build(config):
    return build_model(ModelConfig(**config))


def token_losses(model, tokens, block, batch_size, device, starts=None, autocast=None):
    """The cross-entropy of each target token of the windows at `starts`, in one float64 array."""
    batches = data.window_losses(model, tokens, block, batch_size, device, starts, autocast)
    return np.concatenate([losses for _, losses in batches])


def evaluate_in(folder, *args):
    """evaluate.main in `folder` (it reads data/ and the run relative to the working directory); its result dict."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return evaluate.main(list(args))
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("n_tokens", [2, 17, 33, 50])
def test_windows_predict_every_token_but_the_first_exactly_once(n_tokens):
    block = 16
    targets = [t for s in data.window_starts(n_tokens, block)
               for t in range(s + 1, min(s + block, n_tokens - 1) + 1)]
    assert targets == list(range(1, n_tokens))


@pytest.mark.parametrize("variant", ["baseline", "encdec", "parallel"])
def test_token_losses_equal_the_model_loss_over_the_same_windows(variant):
    model = tiny_model(variant=variant)
    tokens = np.random.default_rng(0).integers(50, size=71)  # 4 full windows of 16 and one of 6
    losses = token_losses(model, tokens, 16, batch_size=3, device="cpu")
    assert len(losses) == 70
    with torch.no_grad():
        direct = []
        for s in data.window_starts(len(tokens), 16):
            x = torch.tensor(tokens[s:s + 16][None])[:, :len(tokens) - 1 - s]
            y = torch.tensor(tokens[s + 1:s + 17][None])
            logits, _, _ = model(x, y)
            direct.append(F.cross_entropy(logits[0], y[0], reduction="none"))
    direct = torch.cat(direct).double().numpy()
    np.testing.assert_allclose(losses, direct, rtol=1e-5)


def test_result_does_not_depend_on_the_batch_size():
    model = tiny_model()
    tokens = np.random.default_rng(1).integers(50, size=200)
    results = [token_losses(model, tokens, 16, batch_size=b, device="cpu") for b in (1, 4, 13, 100)]
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=1e-5, atol=1e-6)


def test_evaluation_runs_in_eval_mode_and_restores_training_mode():
    model = tiny_model(dropout=0.5).train()
    tokens = np.random.default_rng(2).integers(50, size=40)
    a = token_losses(model, tokens, 16, 4, "cpu")
    b = token_losses(model, tokens, 16, 4, "cpu")
    assert model.training and np.array_equal(a, b)  # no dropout: the same figures twice


def test_byte_tokens_are_one_byte_each():
    assert evaluate.token_byte_lengths({"tokenizer": "byte", "vocab_size": 256}).tolist() == [1] * 256


def test_gpt2_byte_lengths_add_up_to_the_utf8_bytes_of_the_text():
    encode, decode, _, eot = get_tokenizer("gpt2")
    text = " ".join(WORDS * 3)
    ids = np.array(encode(text) + [eot])
    lengths = evaluate.token_byte_lengths({"tokenizer": "gpt2", "vocab_size": 50257})
    assert lengths[ids].sum() == len(text.encode("utf-8")) + 1  # end-of-text counts as one byte


def test_split_losses_read_every_val_token_once_and_as_many_train_windows_spread_evenly(compact, monkeypatch):
    """train.py's evaluation with eval_iters=0: the val figure is evaluate.py's, the train one of as many windows."""
    folder = compact / "data" / "small"
    val, train = (np.fromfile(folder / f"{split}.bin", dtype=np.uint16) for split in ("val", "train"))
    model = tiny_model(vocab_size=json.load(open(folder / "meta.json"))["vocab_size"], context_size=16)
    calls, window_losses = [], data.window_losses

    def recorded(model, tokens, block, batch_size, device, starts=None, *args):
        batches = list(window_losses(model, tokens, block, batch_size, device, starts, *args))
        calls.append((len(tokens), starts, np.concatenate([losses for _, losses in batches])))
        return iter(batches)
    monkeypatch.setattr(data, "window_losses", recorded)
    result = data.split_losses(model, str(folder), 16, 64, "cpu")
    assert set(result) == {"train_loss", "val_loss", "val_loss_seen_ids"}
    (n_train, train_starts, train_losses), (n_val, val_starts, val_losses) = calls
    assert (n_train, n_val, val_starts) == (len(train), len(val), None)
    assert len(train_starts) == len(data.window_starts(len(val), 16)) > 1
    assert train_starts[0] == 0 and train_starts[-1] == len(train) - 17 and train_starts == sorted(train_starts)
    assert result["train_loss"] == pytest.approx(train_losses.mean(), rel=1e-12)
    direct = token_losses(model, val.astype(np.int64), 16, 64, "cpu")  # evaluate.py's figure for the val split
    assert len(val_losses) == len(val) - 1 and result["val_loss"] == pytest.approx(direct.mean(), rel=1e-6)
    unseen = ~np.isin(val[1:], train)  # targets whose id never occurs in train.bin
    assert 0 < unseen.sum() < len(unseen), "the stand-in text should have a few val-only ids"
    assert result["val_loss_seen_ids"] == pytest.approx(direct[~unseen].mean(), rel=1e-6)


def test_split_losses_spread_at_most_512_train_windows(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for split, n in (("train", 12000), ("val", 9000)):  # 562 val windows of 16
        rng.integers(0, 50, size=n).astype(np.uint16).tofile(tmp_path / f"{split}.bin")
    starts, window_losses = [], data.window_losses

    def recorded(model, tokens, block, batch_size, device, windows=None, *args):
        starts.append(windows)
        return window_losses(model, tokens, block, batch_size, device, windows, *args)
    monkeypatch.setattr(data, "window_losses", recorded)
    data.split_losses(tiny_model(vocab_size=50, context_size=16), str(tmp_path), 16, 256, "cpu")
    assert len(starts[0]) == 512 and starts[1] is None


def test_train_eval_iters_0_logs_the_val_loss_evaluate_reports(trained):
    log = [json.loads(line) for line in open(trained / "run" / "log.jsonl")]
    result = run("evaluate.py", "--out_dir=run", "--batch_size=3", cwd=trained)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    val_tokens = os.path.getsize(trained / "data" / "small" / "val.bin") // 2
    assert report["tokens"] == val_tokens - 1
    assert math.isclose(report["loss"], log[-1]["val_loss"], rel_tol=1e-6)
    assert math.isclose(report["bits_per_byte"], report["loss"] * report["tokens"] / report["bytes"] / math.log(2))
    assert {"ln_embed_gain_norm", "ln_encoder_out_gain_norm", "val_embedding_loss"} <= set(log[-1])
    # which of the two figures it is: every token once, not train.py's sampled windows
    assert "(every token once; train.py's val loss, a mean over eval_iters batches of random windows" in result.stdout


def test_evaluate_input_text_matches_the_prepared_split(trained):
    """The val split's articles, written out as text, score as the split does: --input tokenizes like prepare."""
    meta = json.load(open(trained / "data" / "small" / "meta.json"))
    _, decode, _, eot = get_tokenizer("gpt2", meta["compact_vocab"])
    ids = np.fromfile(trained / "data" / "small" / "val.bin", dtype=np.uint16).tolist()
    articles, current = [], []
    for i in ids:
        if i == eot:
            articles.append(decode(current))
            current = []
        else:
            current.append(i)
    (trained / "val.txt").write_text("\n".join(articles) + "\n", encoding="utf-8")  # title lines cut it up again
    split, text = evaluate_in(trained, "--out_dir=run"), evaluate_in(trained, "--out_dir=run", "--input=val.txt")
    assert (text["tokens"], text["bytes"]) == (split["tokens"], split["bytes"])
    assert math.isclose(text["loss"], split["loss"], rel_tol=1e-9)


def test_evaluate_input_leaves_out_and_counts_the_tokens_outside_a_compact_vocabulary(trained):
    """Any text scores on a compact-vocabulary run (it stopped, 'outside the compact vocabulary'): a word the training
    text lacks has no id, so it is left out and counted, and the text scores as it does without that word."""
    text = (trained / "text.txt").read_text(encoding="utf-8")
    (trained / "plain.txt").write_text(text, encoding="utf-8")
    (trained / "unknown.txt").write_text(text.replace(" castle", " quantum castle", 3), encoding="utf-8")
    unknown = len(get_tokenizer("gpt2")[0](" quantum")) * 3
    plain, mixed = (evaluate_in(trained, "--out_dir=run", f"--input={name}") for name in ("plain.txt", "unknown.txt"))
    assert (plain["tokens_outside_vocab"], mixed["tokens_outside_vocab"]) == (0, unknown)
    assert (mixed["tokens"], mixed["bytes"]) == (plain["tokens"], plain["bytes"])
    assert math.isclose(mixed["loss"], plain["loss"], rel_tol=1e-9)


def test_evaluate_needs_only_the_run_folder_for_any_text(trained, tmp_path):
    """The checkpoint carries the tokenizer and the compact vocabulary: a copy of the run, evaluated from a folder
    without data/, scores a text as beside its data; its own split, found nowhere, is a one-line error saying where
    it was looked for and naming --input."""
    shutil.copytree(trained / "run", tmp_path / "copy")
    (tmp_path / "elsewhere").mkdir()
    beside_data = evaluate_in(trained, "--out_dir=run", f"--input={trained / 'text.txt'}")
    alone = evaluate_in(tmp_path / "elsewhere", f"--out_dir={tmp_path / 'copy'}", f"--input={trained / 'text.txt'}")
    del alone["out_dir"], beside_data["out_dir"]
    assert alone == beside_data
    with pytest.raises(SystemExit) as exit:
        evaluate_in(tmp_path / "elsewhere", f"--out_dir={tmp_path / 'copy'}")
    assert_one_line_error(str(exit.value.code), "data/small/ not found", "above", "--input", "prepare_wikipedia.py")


def test_evaluate_finds_a_run_own_split_from_any_working_folder(trained, tmp_path):
    """data/<dataset> beside the run's folder or above it (where it was trained) is found from anywhere: it worked
    only from the training folder."""
    here = evaluate_in(trained, "--out_dir=run")
    (tmp_path / "elsewhere").mkdir()
    away = evaluate_in(tmp_path / "elsewhere", f"--out_dir={trained / 'run'}")
    assert away["source"] == str(trained / "data" / "small" / "val.bin") and here["source"] == "data/small/val.bin"
    assert {k: v for k, v in away.items() if k not in ("out_dir", "source")} == {
        k: v for k, v in here.items() if k not in ("out_dir", "source")}


def test_evaluate_a_reversal_checkpoint_gives_the_held_out_accuracy_train_py_logs(reversal_run, tmp_path,
                                                                                   monkeypatch):
    """A reversal run (it was refused) is scored as train.py scores it: exact-sequence accuracy by greedy decoding on
    the held-out sequences, from any working folder; --split=train on the sequences it trained on; --input refused."""
    logged = [json.loads(line) for line in open(reversal_run / "rev" / "log.jsonl")][-1]
    held_out = evaluate_in(tmp_path, f"--out_dir={reversal_run / 'rev'}", "--device=cpu")
    train_sequences, held_out_sequences = reversal.split()
    assert held_out["sequences"] == sum(map(len, held_out_sequences.values())) == 480
    assert held_out["accuracy"] == logged["val_accuracy"]
    train_sequences = {n: xs[:300] for n, xs in train_sequences.items()}  # a part of the 66k: seconds, not minutes
    monkeypatch.setitem(reversal.SEQUENCES, "train", train_sequences)
    trained_on = evaluate_in(reversal_run, "--out_dir=rev", "--split=train", "--device=cpu")
    assert trained_on["sequences"] == sum(map(len, train_sequences.values()))
    model = checkpoints.load_checkpoint(str(reversal_run / "rev"), build=build)[1]
    assert trained_on["accuracy"] == reversal.accuracy(model, train_sequences, "cpu")
    (tmp_path / "text.txt").write_text("3 5 4\n")
    with pytest.raises(SystemExit) as exit:
        evaluate_in(reversal_run, "--out_dir=rev", f"--input={tmp_path / 'text.txt'}")
    assert_one_line_error(str(exit.value.code), "reversal", "leave out --input")


@pytest.mark.parametrize("args, fragment", [
    (["--out_dir=nowhere"], "no checkpoint at nowhere"),
    (["--out_dir=run", "--input=empty.txt"], "nothing to predict"),
    (["--out_dir=run", "--input=missing.txt"], "cannot read missing.txt"),
    (["--out_dir=run", "--batch_size=0"], "--batch_size=0"),
    (["--out_dir=run", "--device=gpu"], "device='gpu' is not allowed"),
    (["--out_dir=run", "--device=mps"], "device='mps' is not available here"),
])
def test_bad_input_is_one_line_error(trained, args, fragment):
    (trained / "empty.txt").write_text("")
    with pytest.raises(SystemExit) as exit:
        evaluate_in(trained, *args)
    assert_one_line_error(str(exit.value.code), fragment)  # a message as the code: exit status 1


@pytest.mark.parametrize("content, fragment", [
    (np.frombuffer(b"the river castle was built " * 40, np.uint8).astype(np.uint16).tobytes(), "has a NUL byte"),
    (b"the river castle\0was built in a year by the king of the north\n", "has a NUL byte at byte offset 16"),
    ("the café was built\n".encode("latin-1"), "is not UTF-8 text: byte 0xe9"),
], ids=["byte_tokens_bin", "nul_in_text", "latin1"])
def test_evaluate_input_refuses_what_prepare_refuses_as_text_with_the_same_line(trained, content, fragment):
    """--input is read as prepare_wikipedia.py reads a text file: a token file, a NUL (the byte tokenizer's end of
    text) or bytes that are not UTF-8 are refused in one line, the line prepare gives, not scored (it was, exit 0)."""
    (trained / "notext.bin").write_bytes(content)
    with pytest.raises(SystemExit) as exit:
        evaluate_in(trained, "--out_dir=run", "--input=notext.bin")
    with pytest.raises(SystemExit) as prepare_exit:
        pw.main(["--input", str(trained / "notext.bin"), "--out_dir", str(trained / "refused"), "--name", "x"])
    assert_one_line_error(str(exit.value.code), "notext.bin", fragment)
    assert str(prepare_exit.value.code).replace(str(trained / "notext.bin"), "notext.bin") == str(exit.value.code)


def tampered_record(trained, folder, change):
    """A copy of the compact run in folder/run whose checkpoint's tokenizer record (dataset_meta) is changed by
    change(record)."""
    shutil.copytree(trained / "run", folder / "run")
    checkpoint = torch.load(folder / "run" / "ckpt.pt", weights_only=True)
    change(checkpoint["dataset_meta"])
    torch.save(checkpoint, folder / "run" / "ckpt.pt")


@pytest.mark.parametrize("change, fragments", [
    (lambda r: r.pop("compact_vocab"), ["gpt2 tokenizer has 50257 tokens", "vocab_size="]),
    (lambda r: r.update(tokenizer="sentencepiece"), ["has no dataset_meta of the kind this code reads"]),
    (lambda r: r.update(tokenizer="byte"), ["compact_vocab", "gpt2"]),
    (lambda r: r.update(compact_vocab=r["compact_vocab"][:-1]), ["end-of-text"]),
    (lambda r: r.update(compact_vocab=[0, 0] + r["compact_vocab"][2:]), ["distinct"]),
    (lambda r: (r.pop("compact_vocab"), r.update(tokenizer="byte", vocab_size=256, eot_token=0)),
     ["byte tokenizer has 256 tokens", "vocab_size="]),
    (lambda r: (r.clear(), r.update(tokenizer=["gpt2"])), ["has no dataset_meta of the kind this code reads"]),
], ids=["no_compact_vocab", "unknown_tokenizer", "byte_with_compact_vocab", "no_end_of_text", "repeated_ids",
        "another_tokenizer", "not_a_name"])
def test_a_checkpoint_tokenizer_record_that_disagrees_with_the_model_is_one_line(trained, tmp_path, change, fragments):
    """The tokenizer record a checkpoint carries, used where no data/ is beside it, is checked against the model's
    vocabulary: without its compact_vocab sample.py printed 'theastastast...' (exit 0) and evaluate.py raised an
    IndexError; another tokenizer's record, or one without end-of-text, a KeyError."""
    tampered_record(trained, tmp_path, change)
    (tmp_path / "text.txt").write_text((trained / "text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    for script, args in [("sample.py", ["--start= the castle", "--max_new_tokens=5"]),
                         ("evaluate.py", ["--input=text.txt"])]:
        result = run(script, "--out_dir=run", "--device=cpu", *args, cwd=tmp_path, check=False)
        assert_one_line_error(result, "run/ckpt.pt", "dataset_meta", *fragments)


def test_a_dataset_prepared_again_with_another_tokenizer_is_refused(trained, tmp_path):
    os.symlink(trained / "run", tmp_path / "run")
    (tmp_path / "text.txt").write_text((trained / "text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    pw.main(["--input", str(tmp_path / "text.txt"), "--tokenizer", "gpt2", "--min_chars", "0",
             "--out_dir", str(tmp_path / "data"), "--name", "small"])  # full 50257-token vocabulary now
    with pytest.raises(SystemExit) as exit:
        evaluate_in(tmp_path, "--out_dir=run")
    assert_one_line_error(str(exit.value.code), "prepared again since this model was trained on it (its tokens differ")


def test_a_dataset_prepared_again_from_other_text_is_refused_not_evaluated_with_the_wrong_ids(trained, tmp_path):
    """Same tokenizer, same vocabulary size, other ids: a loss computed anyway would be wrong (it was, exit 0)."""
    os.symlink(trained / "run", tmp_path / "run")
    text = (trained / "text.txt").read_text(encoding="utf-8")
    (tmp_path / "text.txt").write_text(text.replace("castle", "tower"), encoding="utf-8")
    pw.main(["--input", str(tmp_path / "text.txt"), "--tokenizer", "gpt2", "--compact_vocab", "--min_chars", "0",
             "--val_fraction", "0.25", "--out_dir", str(tmp_path / "data"), "--name", "small"])
    with pytest.raises(SystemExit) as exit:
        evaluate_in(tmp_path, "--out_dir=run")
    assert_one_line_error(str(exit.value.code), "data/small was prepared again", "compact_vocab",
                          "--compact_vocab")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "tpu"])
def test_a_device_name_it_cannot_use_is_one_line_error(trained, device):
    with pytest.raises(SystemExit) as exit:
        evaluate_in(trained, "--out_dir=run", f"--device={device}")
    assert_one_line_error(str(exit.value.code), f"device='{device}'", "--device=")


def peak_memory(folder, text_file):
    """Peak resident memory of evaluate.py on one text, in bytes, from a process of its own."""
    code = ("import resource, runpy, sys; sys.argv = ['evaluate.py', '--out_dir=out_full', '--input=%s', "
            "'--batch_size=64', '--device=cpu']; runpy.run_path(%r, run_name='__main__'); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)"
            % (text_file, os.path.join(ROOT, "evaluate.py")))
    result = subprocess.run([sys.executable, "-c", code], cwd=folder, env=ENV, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return int(result.stderr.strip().splitlines()[-1])


def test_evaluation_memory_does_not_grow_with_the_length_of_the_text(workdir):
    """4x the text (byte tokens) costs under 100 bytes a token more: the batches' losses were kept (~800 a token)."""
    text = (workdir / "text.txt").read_text(encoding="utf-8")
    (workdir / "eval_short.txt").write_text(text * 16, encoding="utf-8")
    (workdir / "eval_long.txt").write_text(text * 64, encoding="utf-8")
    extra_tokens = 48 * len(text.encode())
    growth = peak_memory(workdir, "eval_long.txt") - peak_memory(workdir, "eval_short.txt")
    assert growth < 100 * extra_tokens, (growth, extra_tokens)


def test_ctrl_c_is_one_line(workdir):
    assert_interrupted(interrupted_at("torch", "load", "evaluate.py", "--out_dir=out_full", "--device=cpu",
                                      cwd=workdir), "nothing was written")


@pytest.mark.parametrize("cut", [1, 2], ids=["odd_bytes", "a_token_short"])
def test_a_split_cut_short_is_one_line_error(trained, tmp_path, cut):
    shutil.copytree(trained / "data", tmp_path / "data")
    os.symlink(trained / "run", tmp_path / "run")
    val = tmp_path / "data" / "small" / "val.bin"
    val.write_bytes(val.read_bytes()[:-cut])
    with pytest.raises(SystemExit) as exit:
        evaluate_in(tmp_path, "--out_dir=run")
    assert_one_line_error(str(exit.value.code), "data/small/val.bin", "prepare the dataset again")


def test_help_gives_the_whole_docstring_unbroken():
    result = run("evaluate.py", "--help", cwd=ROOT)
    text = " ".join(result.stdout.split())
    assert "(T: context_size): every token but the first once, whatever the batch size." in text


def test_evaluate_does_not_read_a_dataset_being_prepared(trained):
    """It holds data/<dataset> as train.py does, beside other readers: a preparation holding it alone keeps it out."""
    with holding(os.path.join("data", "small"), "prepare_wikipedia.py --name=small", trained) as holder:
        result = run("evaluate.py", "--out_dir=run", cwd=trained, check=False)
        assert_one_line_error(result, f"is in use by pid {holder.pid} (prepare_wikipedia.py --name=small")
    assert run("evaluate.py", "--out_dir=run", cwd=trained).returncode == 0
