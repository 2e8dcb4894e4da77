"""Specifications of sample.py and of model.generate's sampling: it continues a prompt with the run's tokenizer, which
the checkpoint carries, from any folder; top-p and the end-of-text stop; each bad input ends in one line naming the
problem and the fix. CPU only, no network. (The reversal model's sampling: test_reversal.py.)

    python -m pytest -q tests/test_sample.py
"""
import json
import os
import re
import shutil

import numpy as np
import pytest
import torch

from conftest import (assert_interrupted, assert_one_line_error, copy_run, interrupted_at, raising_at, run, tiny_model,
                      train)


def test_sample_continues_the_prompt(workdir):
    result = run("sample.py", "--out_dir=out_full", "--start=the castle", "--num_samples=2", "--max_new_tokens=20",
                 "--device=cpu", cwd=workdir)
    samples = [s for s in result.stdout.split("-" * 40 + "\n") if s.strip()]
    assert len(samples) == 2 and all(s.startswith("the castle") and len(s) > len("the castle") + 5 for s in samples)


def test_sample_reads_a_prompt_file_longer_than_the_context(workdir):
    (workdir / "prompt.txt").write_text("the river " * 10)  # 100 tokens, context_size 32
    result = run("sample.py", "--out_dir=out_full", "--start=FILE:prompt.txt", "--num_samples=1",
                 "--max_new_tokens=5", "--device=cpu", cwd=workdir)
    assert result.stdout.startswith("the river " * 10)


def test_an_untrained_byte_model_prints_control_bytes_as_escapes_not_as_terminal_codes(workdir, tmp_path):
    train(workdir, "out_untrained", "--max_iters=0")
    result = run("sample.py", "--out_dir=out_untrained", "--max_new_tokens=300", "--temperature=5", "--device=cpu",
                 cwd=workdir)
    assert not any(ord(c) < 32 and c not in "\n\t" or ord(c) == 127 for c in result.stdout)
    assert re.search(r"\\x[01][0-9a-f]", result.stdout)  # drawn, and shown


def test_sample_with_an_empty_prompt_prints_no_end_of_text_byte(workdir):
    result = run("sample.py", "--out_dir=out_full", "--start=", "--num_samples=2", "--max_new_tokens=5",
                 "--device=cpu", cwd=workdir)
    samples = result.stdout.split("-" * 40 + "\n")[:2]
    assert all(len(s) > 1 and not s.startswith(("\0", "\\x00")) for s in samples), samples


def test_sample_needs_only_the_run_folder_from_any_working_folder(workdir, tmp_path):
    """The checkpoint carries the tokenizer: a copy of the run alone, sampled from elsewhere, gives the same text."""
    shutil.copytree(workdir / "out_full", tmp_path / "run")
    (tmp_path / "elsewhere").mkdir()
    args = ["--start=the castle", "--num_samples=2", "--max_new_tokens=20", "--device=cpu"]
    here = run("sample.py", "--out_dir=out_full", *args, cwd=workdir)  # beside data/tiny, which is checked
    away = run("sample.py", f"--out_dir={tmp_path / 'run'}", *args, cwd=tmp_path / "elsewhere")
    assert away.stdout == here.stdout and away.stdout.startswith("the castle")


def test_bare_sample_names_the_run_it_samples_and_in_a_folder_without_one_the_quick_start(workdir, tmp_path):
    """`python sample.py` sampled out/<the one run> without a word, and with none said only "no out/*/ckpt.pt"."""
    shutil.copytree(workdir / "out_full", tmp_path / "out" / "tiny")
    result = run("sample.py", "--num_samples=1", "--max_new_tokens=5", "--device=cpu", cwd=tmp_path)
    named = f"sampling {os.path.join('out', 'tiny')}, the one run here (--out_dir picks another)"
    assert named in result.stderr.splitlines() and result.stdout
    (tmp_path / "fresh").mkdir()
    result = run("sample.py", cwd=tmp_path / "fresh", check=False)
    assert_one_line_error(result, "no trained models here", "train one first", "`python train.py --dataset=reversal`")


def test_sample_without_checkpoint_or_its_tokenizer_says_what_to_do(workdir, tmp_path):
    assert_one_line_error(run("sample.py", "--out_dir=nowhere", cwd=workdir, check=False), "nowhere", "train")
    shutil.copytree(workdir / "out_full", tmp_path / "out_full")  # an older checkpoint, without dataset_meta
    checkpoint = torch.load(tmp_path / "out_full" / "ckpt.pt", weights_only=True)
    del checkpoint["dataset_meta"]
    torch.save(checkpoint, tmp_path / "out_full" / "ckpt.pt")
    assert_one_line_error(run("sample.py", "--out_dir=out_full", cwd=tmp_path, check=False), "dataset_meta",
                          "an older version wrote it")


@pytest.mark.parametrize("args, fragments", [
    (["--device=foo"], ["device='foo'", "--device=cpu"]),
    (["--device=mps"], ["device='mps'", "MPS", "not available"]),
    (["--temperature=nan"], ["temperature=nan"]),
    (["--start=FILE:binary.bin"], ["binary.bin", "not UTF-8"]),
    ([b"--start=caf\xe9"], ["caf", "not UTF-8"]),
    (["--start=FILE:/dev/zero"], ["/dev/zero is longer than 1,048,576 bytes"]),  # an endless file
], ids=["device", "mps_absent", "temperature", "binary_prompt_file", "non_utf8_prompt", "endless_prompt_file"])
def test_sample_bad_input_is_one_line_error(workdir, args, fragments):
    (workdir / "binary.bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    # an argument given as bytes that are not UTF-8 reaches sample.py as it would from a shell
    assert_one_line_error(run("sample.py", "--out_dir=out_full", *args, cwd=workdir, check=False), *fragments)


@pytest.mark.parametrize("meta", ["{oops", json.dumps({"tokenizer": "gpt2", "vocab_size": 50257})],
                         ids=["meta_not_json", "tokenizer_of_another_vocabulary"])
def test_sample_decodes_with_the_tokenizer_its_checkpoint_records_whatever_data_holds(workdir, tmp_path, meta):
    copy_run(workdir, tmp_path)
    expected = run("sample.py", "--out_dir=out", "--device=cpu", "--num_samples=1", cwd=tmp_path).stdout
    (tmp_path / "data" / "tiny" / "meta.json").write_text(meta)
    assert run("sample.py", "--out_dir=out", "--device=cpu", "--num_samples=1", cwd=tmp_path).stdout == expected


@pytest.mark.parametrize("start", ["3 \u00b2 1", "3 \u0663 1"], ids=["superscript_two", "arabic_indic_three"])
def test_a_reversal_prompt_with_a_digit_int_cannot_read_is_one_line_error(reversal_run, start):
    # str.isdigit() accepts these; int() does not
    result = run("sample.py", "--out_dir=rev", f"--start={start}", "--device=cpu", cwd=reversal_run, check=False)
    assert_one_line_error(result, "takes 1 to 5 digits from 1 to 9", repr(start))


def test_top_p_beside_greedy_top_k_is_refused_naming_both(workdir):
    """--top_k=1 --top_p=0.5 ignored top_p without a word."""
    result = run("sample.py", "--out_dir=out_full", "--top_k=1", "--top_p=0.5", "--device=cpu", cwd=workdir,
                 check=False)
    assert_one_line_error(result, "top_p=0.5", "drop it or --top_k=1")


@pytest.mark.parametrize("flag, fragment", [("--top_p=0", "use one in (0, 1]"), ("--top_p=1.5", "use one in (0, 1]"),
                                            ("--top_p=nan", "use one in (0, 1]"),
                                            ("--max_new_tokens=-1", "use 0 or more")])
def test_a_sampling_setting_out_of_its_range_is_refused_before_the_model_loads(workdir, flag, fragment):
    result = run("sample.py", "--out_dir=nowhere", flag, "--device=cpu", cwd=workdir, check=False)
    assert_one_line_error(result, flag[2:], fragment)


def test_a_reversal_model_decodes_greedily_unless_top_p_asks_to_sample(reversal_run):
    """Greedy has one answer, printed once; --top_p without --top_k samples (it was ignored): num_samples answers."""
    common = ["--out_dir=rev", "--start=3 5 4", "--num_samples=4", "--device=cpu"]
    greedy = run("sample.py", *common, cwd=reversal_run).stdout.splitlines()
    nucleus = run("sample.py", *common, "--top_p=0.9", "--temperature=5", cwd=reversal_run).stdout.splitlines()
    assert len(greedy) == 1 and len(nucleus) == 4 and len(set(nucleus)) > 1, (greedy, nucleus)


def test_ctrl_c_is_one_line(workdir):
    assert_interrupted(interrupted_at("torch", "load", "sample.py", "--out_dir=out_full", cwd=workdir))


@pytest.mark.parametrize("error", [  # a CPU's, and the same on CUDA
    "RuntimeError('[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can\\'t allocate memory: you "
    "tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)')",
    "torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.1 "
    "GiB of which 70.2 GiB is free.')"])
def test_out_of_memory_is_one_line_naming_the_settings_to_lower(workdir, error):
    result = raising_at("torch.nn.functional", "scaled_dot_product_attention", error, "sample.py",
                        "--out_dir=out_full", "--num_samples=8", "--device=cpu", cwd=workdir)
    assert_one_line_error(result, "out of memory (", "allocate", "lower --num_samples or --max_new_tokens")


@pytest.mark.parametrize("temperature", ["1e-30", "1e-300"])  # 1e-300: 0 in float32, a RuntimeError it was
def test_a_tiny_temperature_samples_the_greedy_tokens_instead_of_overflowing(workdir, temperature):
    common = ["--out_dir=out_full", "--start=the river", "--num_samples=1", "--max_new_tokens=20", "--device=cpu"]
    tiny = run("sample.py", *common, f"--temperature={temperature}", cwd=workdir)
    greedy = run("sample.py", *common, "--top_k=1", cwd=workdir)
    assert tiny.stdout == greedy.stdout


def test_a_prompt_whose_first_word_lacks_its_space_in_a_compact_vocabulary_is_sampled_with_it(trained):
    """GPT-2 tokens 'the' and ' the' differ; a compact vocabulary holds only the tokens of its training text, where
    every word follows a space: the prompt gets the space, with a note, instead of an error (as it was)."""
    result = run("sample.py", "--out_dir=run", "--start=the castle", "--num_samples=1", "--max_new_tokens=5",
                 "--device=cpu", cwd=trained)
    assert result.stdout.startswith(" the castle") and "note: sampling from ' the castle'" in result.stderr
    assert_one_line_error(run("sample.py", "--out_dir=run", "--start=the quantum castle", "--device=cpu",
                              cwd=trained, check=False), "outside the model's vocabulary", "quantum")


def test_sample_stops_at_the_end_of_the_article_and_prints_what_comes_before(workdir):
    """With the same seed, a sample that stops at the end-of-text token (byte 0 here) is the one that runs on, cut
    there; the hot temperature makes the end-of-text token come up in a few of the samples."""
    args = ["--out_dir=out_full", "--start=the river", "--num_samples=6", "--max_new_tokens=200", "--temperature=3",
            "--device=cpu"]
    stopped = run("sample.py", *args, cwd=workdir).stdout.split("-" * 40 + "\n")[:-1]
    running_on = run("sample.py", *args, "--stop_at_eot=False", cwd=workdir).stdout.split("-" * 40 + "\n")[:-1]
    # the end-of-text byte, 0, printed as an escape
    assert stopped == [s.split("\\x00")[0] + "\n" if "\\x00" in s else s for s in running_on]
    assert sum("\\x00" in s for s in running_on) >= 2  # the property was put to the test


def nucleus(probs, top_p):
    """The fewest most likely tokens whose probabilities add up to top_p, renormalised; computed directly, float64."""
    kept, total = np.zeros(len(probs)), 0.0
    for i in np.argsort(-probs, kind="stable"):
        kept[i], total = probs[i], total + probs[i]
        if total >= top_p:
            break
    return kept / kept.sum()


@pytest.mark.parametrize("top_p, top_k", [(0.3, None), (0.8, None), (0.8, 10), (1.0, None)])
def test_top_p_draws_from_the_fewest_most_likely_tokens_adding_up_to_p(monkeypatch, top_p, top_k):
    model = tiny_model(vocab_size=50)
    x = torch.randint(50, (3, 6), generator=torch.Generator().manual_seed(0))
    drawn = []
    monkeypatch.setattr(torch, "multinomial", lambda probs, n: drawn.append(probs.clone()) or probs.argmax(-1, True))
    model.generate(x, 1, temperature=0.7, top_k=top_k, top_p=top_p)
    with torch.no_grad():
        logits = model(x)[0][:, -1].double() / 0.7
    if top_k:
        logits[logits < logits.topk(top_k).values[:, [-1]]] = -float("inf")
    for probs, got in zip(torch.softmax(logits, -1).numpy(), drawn[0].double().numpy()):
        want = nucleus(probs, top_p)
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert top_p == 1 or 1 < (want > 0).sum() < (probs > 0).sum()  # some tokens kept, some left out


@pytest.mark.parametrize("top_p", ["1e-50", "1e-46", "5e-324"])  # below float32's smallest number: 0 there
def test_a_top_p_below_what_float32_holds_samples_the_greedy_tokens_instead_of_crashing(workdir, top_p):
    common = ["--out_dir=out_full", "--start=the river", "--num_samples=1", "--max_new_tokens=20", "--device=cpu"]
    assert run("sample.py", *common, f"--top_p={top_p}", cwd=workdir).stdout == \
        run("sample.py", *common, "--top_k=1", cwd=workdir).stdout


def test_generation_stops_when_every_sequence_drew_the_stop_token_and_a_finished_one_repeats_it():
    model = tiny_model(vocab_size=50)
    x = torch.randint(50, (2, 4), generator=torch.Generator().manual_seed(1))
    free = model.generate(x, 30, top_k=1)[:, 4:].tolist()  # greedy: the same tokens with and without a stop
    stop = free[0][5]
    ends = [row.index(stop) + 1 if stop in row else 30 for row in free]
    stopped = model.generate(x, 30, top_k=1, stop_token=stop)[:, 4:].tolist()
    assert len(stopped[0]) == max(ends)  # no step after the last sequence stopped
    for row, end, got in zip(free, ends, stopped):
        assert got == row[:end] + [stop] * (max(ends) - end)
    assert model.generate(x, 30, top_k=1, stop_token=None).tolist() == model.generate(x, 30, top_k=1).tolist()
