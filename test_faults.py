"""Faults and bad inputs of train.py and sample.py: each ends in one line naming the problem and the fix, or in
correct behaviour, and no file is lost. CPU only, no network.

    python -m pytest -q test_faults.py

A full disk is /dev/full behind the temporary file that train.py writes; Ctrl-C is SIGINT.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from test_train import ENV, HERE, TINY, assert_one_line_error, log, run, train, workdir  # noqa: F401 (workdir: a fixture)

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full to stand for a full disk")


def copy_run(workdir, tmp_path, name="out"):
    """tmp_path with data/tiny and a copy of the finished 6-iteration run in tmp_path/name."""
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    shutil.copytree(workdir / "out_full", tmp_path / name)
    return tmp_path / name


def files(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


# 1. a new run in an existing folder

def test_bad_setting_leaves_an_existing_run_untouched(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    before = files(out)
    assert_one_line_error(train(tmp_path, "out", "--eval_iters=-1", check=False), "eval_iters=-1")
    assert files(out) == before


def test_run_from_scratch_refuses_to_replace_a_checkpoint_unless_told(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    before = files(out)
    result = train(tmp_path, "out", "--max_iters=2", check=False)
    assert_one_line_error(result, "ckpt.pt", "--init_from=resume", "--out_dir", "--overwrite=True")
    assert files(out) == before
    train(tmp_path, "out", "--max_iters=2", "--overwrite=True")
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2]


def test_run_from_scratch_may_reuse_a_folder_with_a_log_but_no_checkpoint(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)  # as study.py leaves a run it deleted the checkpoint of, and re-runs
    os.remove(out / "ckpt.pt")
    train(tmp_path, "out", "--max_iters=2")
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2]


# 2. values that would train wrongly or crash

@pytest.mark.parametrize("setting", [
    "grad_clip=-1", "batch_size=0", "batch_size=-1", "eval_iters=-1", "eval_interval=0", "log_interval=0",
    "gradient_accumulation_steps=0", "seed=-1", "learning_rate=-1", "learning_rate=1e999", "beta2=1.5", "device=foo"])
def test_setting_out_of_range_is_one_line_error(workdir, setting):
    key, value = setting.split("=")
    assert_one_line_error(train(workdir, "out_err", f"--{setting}", "--max_iters=2", check=False), f"{key}=")
    assert not os.path.exists(workdir / "out_err")


def test_whole_split_evaluation_is_refused_for_reversal(tmp_path):
    result = run("train.py", "--dataset=reversal", "--eval_iters=0", "--device=cpu", cwd=tmp_path, check=False)
    assert_one_line_error(result, "eval_iters=0", "reversal")  # eval_iters=0 reads every token of val.bin, which reversal has not


# 3. config files

@pytest.mark.parametrize("text, line", [(b"max_iters = 2\nn_layer = (\n", 2), (b"max_iters = 2\n\nn_layer = 1 / 0\n", 3),
                                        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", None)], ids=["syntax_error", "raises", "binary"])
def test_broken_config_file_names_the_file_and_line(workdir, tmp_path, text, line):
    (tmp_path / "broken.py").write_bytes(text)
    result = train(workdir, "out_err", str(tmp_path / "broken.py"), check=False)
    assert_one_line_error(result, "broken.py", *([f"line {line}"] if line else []))
    assert "<string>" not in result.stderr


# 4. bad datasets, found at start

def break_val_ids(folder):
    ids = np.fromfile(folder / "val.bin", dtype=np.uint16)
    ids[len(ids) // 2] = 300  # the byte vocabulary has 256
    ids.tofile(folder / "val.bin")


def change_one_train_token(folder):
    ids = np.fromfile(folder / "train.bin", dtype=np.uint16)
    ids[len(ids) // 2] = (ids[len(ids) // 2] + 1) % 256  # same size, still in the vocabulary
    ids.tofile(folder / "train.bin")


def write_meta(folder, **changes):
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({k: v for k, v in {**meta, **changes}.items() if v is not None}))


@pytest.mark.parametrize("breaks, fragments", [
    (break_val_ids, ["val.bin", "token id 300", "vocab_size is 256", "--tokenizer=byte"]),
    (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes()[:os.path.getsize(d / "train.bin") // 4 * 2]),
     ["train.bin", "train_tokens", "--tokenizer=byte"]),
    (lambda d: (d / "train.bin").write_bytes((d / "train.bin").read_bytes()[:-1]), ["train.bin", "odd number of bytes"]),
    (lambda d: (d / "meta.json").write_text('{"vocab_size": 256,'), ["meta.json"]),
    (lambda d: (d / "meta.json").write_text("[256]"), ["meta.json"]),
    (lambda d: write_meta(d, vocab_size=None), ["meta.json", "vocab_size"]),
    (lambda d: (write_meta(d, val_tokens=0), (d / "val.bin").write_bytes(b"")), ["val.bin", "empty", "with --val_fraction 0.05"]),
    (change_one_train_token, ["train.bin", "train_token_sum differs", "different preparations"]),
], ids=["id_beyond_vocab", "train_cut_in_half", "odd_bytes", "meta_not_json", "meta_not_object", "meta_without_vocab",
        "no_val_split", "another_preparation"])
def test_broken_dataset_is_refused_at_start_naming_the_file_and_the_rebuild(workdir, tmp_path, breaks, fragments):
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    breaks(tmp_path / "data" / "tiny")
    result = train(tmp_path, "out", "--max_iters=2", check=False)
    assert_one_line_error(result, *fragments, "prepare_wikipedia.py --input PATH --name=tiny")
    assert not os.path.exists(tmp_path / "out")


# 5. the log

def test_resume_repairs_a_log_line_torn_by_a_crash(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    with open(out / "log.jsonl", "a") as f:
        f.write('{"iter": 8, "train_lo')  # a full disk while appending
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert "dropped its last line" in result.stdout
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4, 6, 8]


def test_corrupt_log_line_before_the_last_is_one_line_error(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    lines = (out / "log.jsonl").read_text().splitlines(keepends=True)
    (out / "log.jsonl").write_text(lines[0] + "garbage\n" + "".join(lines[1:]))
    assert_one_line_error(train(tmp_path, "out", "--init_from=resume", "--max_iters=8", check=False), "log.jsonl line 2")


@needs_dev_full
def test_log_rewrite_on_a_full_disk_keeps_the_old_log(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    before = files(out)
    os.symlink("/dev/full", out / "log.jsonl.tmp")
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "disk is full", "ckpt.pt (iteration 6) is kept")
    assert files(out) == before  # the temporary file is gone too


# 6. a full disk while saving, Ctrl-C

@needs_dev_full
def test_full_disk_while_saving_keeps_the_previous_checkpoint(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    checkpoint = (out / "ckpt.pt").read_bytes()
    os.symlink("/dev/full", out / "ckpt.pt.tmp")
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "disk is full", "ckpt.pt (iteration 6) is kept", "--init_from=resume")
    assert (out / "ckpt.pt").read_bytes() == checkpoint
    assert sorted(os.listdir(out)) == ["ckpt.pt", "log.jsonl"]


def test_ctrl_c_says_where_the_last_checkpoint_is(workdir):
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), *TINY, "--out_dir=out_interrupted",
                                "--max_iters=1000000", "--eval_interval=1000"], cwd=workdir, env={**ENV, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # iteration lines come after eval 0 has saved its checkpoint
        if line.startswith("iter "):
            break
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "interrupted at iteration" in stderr and "out_interrupted/ckpt.pt (iteration 0)" in stderr
    assert "--out_dir=out_interrupted --init_from=resume" in stderr
    assert sorted(os.listdir(workdir / "out_interrupted")) == ["ckpt.pt", "log.jsonl"]


# 9. sample.py

@pytest.mark.parametrize("args, fragments", [
    (["--device=foo"], ["device='foo'", "--device=cpu"]),
    (["--temperature=nan"], ["temperature=nan"]),
    (["--start=FILE:binary.bin"], ["binary.bin", "not UTF-8"]),
    ([b"--start=caf\xe9"], ["not valid UTF-8"]),
], ids=["device", "temperature", "binary_prompt_file", "non_utf8_prompt"])
def test_sample_bad_input_is_one_line_error(workdir, args, fragments):
    (workdir / "binary.bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    result = subprocess.run([sys.executable, os.path.join(HERE, "sample.py"), "--out_dir=out_full", *args],
                            cwd=workdir, env=ENV, capture_output=True)
    result = subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())
    assert_one_line_error(result, *fragments)


@pytest.mark.parametrize("meta, fragments", [
    ("{oops", ["meta.json", "tokenizer"]),
    (json.dumps({"tokenizer": "gpt2", "vocab_size": 50257}), ["meta.json", "gpt2", "vocab_size=256"]),
], ids=["meta_not_json", "tokenizer_of_another_vocabulary"])
def test_sample_with_a_broken_or_mismatched_meta_is_one_line_error(workdir, tmp_path, meta, fragments):
    copy_run(workdir, tmp_path)
    (tmp_path / "data" / "tiny" / "meta.json").write_text(meta)
    assert_one_line_error(run("sample.py", "--out_dir=out", "--device=cpu", cwd=tmp_path, check=False), *fragments)


def test_sample_with_an_empty_prompt_prints_no_end_of_text_byte(workdir):
    result = run("sample.py", "--out_dir=out_full", "--start=", "--num_samples=2", "--max_new_tokens=5", "--device=cpu",
                 cwd=workdir)
    samples = result.stdout.split("-" * 40 + "\n")[:2]
    assert all(len(s) > 1 and not s.startswith("\0") for s in samples), samples


# 10. a resume that changes the batch

def test_resume_with_another_batch_size_logs_the_true_token_count(workdir, tmp_path):
    copy_run(workdir, tmp_path)  # 6 iterations of 2 x 4 x 32 tokens
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8", "--batch_size=8")
    assert [r["tokens"] for r in log(tmp_path, "out")][-2:] == [6 * 2 * 4 * 32, 6 * 2 * 4 * 32 + 2 * 2 * 8 * 32]


def test_resume_with_another_seed_is_refused(workdir, tmp_path):
    copy_run(workdir, tmp_path)
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", "--seed=7", check=False)
    assert_one_line_error(result, "seed=1337", "drop --seed")


# progress

def test_progress_comes_early_with_an_eta_and_a_cpu_warning_for_a_long_run(workdir):
    process = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), *TINY, "--out_dir=out_long",
                                "--max_iters=100000000"], cwd=workdir, env={**ENV, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("iter "):
            break
    process.kill()
    process.wait()
    assert lines[-1].startswith("iter 1:") and " ETA " in lines[-1]
    before_eval = "".join(lines[:[line.startswith("eval 0") for line in lines].index(True)])
    assert "estimated:" in before_eval and "per iteration" in before_eval
    assert "warning: this run would take about" in before_eval and "config/cpu_baseline.py" in before_eval
