"""Specifications of sample.py: it continues a prompt with the run's tokenizer, and each bad input ends in one line
naming the problem and the fix. CPU only, no network. (The reversal model's sampling: test_reversal.py.)

    python -m pytest -q tests/test_sample.py
"""
import json
import shutil

import pytest

from conftest import assert_interrupted, assert_one_line_error, copy_run, interrupted_at, raising_at, run


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


def test_sample_with_an_empty_prompt_prints_no_end_of_text_byte(workdir):
    result = run("sample.py", "--out_dir=out_full", "--start=", "--num_samples=2", "--max_new_tokens=5",
                 "--device=cpu", cwd=workdir)
    samples = result.stdout.split("-" * 40 + "\n")[:2]
    assert all(len(s) > 1 and not s.startswith("\0") for s in samples), samples


def test_sample_without_checkpoint_or_meta_says_what_to_do(workdir, tmp_path):
    assert_one_line_error(run("sample.py", "--out_dir=nowhere", cwd=workdir, check=False), "nowhere", "train")
    shutil.copytree(workdir / "out_full", tmp_path / "out_full")  # a folder without data/tiny/meta.json
    assert_one_line_error(run("sample.py", "--out_dir=out_full", cwd=tmp_path, check=False), "meta.json")


@pytest.mark.parametrize("args, fragments", [
    (["--device=foo"], ["device='foo'", "--device=cpu"]),
    (["--device=mps"], ["device='mps'", "MPS", "not available"]),
    (["--temperature=nan"], ["temperature=nan"]),
    (["--start=FILE:binary.bin"], ["binary.bin", "not UTF-8"]),
    ([b"--start=caf\xe9"], ["not valid UTF-8"]),
], ids=["device", "mps_absent", "temperature", "binary_prompt_file", "non_utf8_prompt"])
def test_sample_bad_input_is_one_line_error(workdir, args, fragments):
    (workdir / "binary.bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    # an argument given as bytes that are not UTF-8 reaches sample.py as it would from a shell
    assert_one_line_error(run("sample.py", "--out_dir=out_full", *args, cwd=workdir, check=False), *fragments)


@pytest.mark.parametrize("meta, fragments", [
    ("{oops", ["meta.json", "tokenizer"]),
    (json.dumps({"tokenizer": "gpt2", "vocab_size": 50257}), ["meta.json", "gpt2", "vocab_size=256"]),
], ids=["meta_not_json", "tokenizer_of_another_vocabulary"])
def test_sample_with_a_broken_or_mismatched_meta_is_one_line_error(workdir, tmp_path, meta, fragments):
    copy_run(workdir, tmp_path)
    (tmp_path / "data" / "tiny" / "meta.json").write_text(meta)
    assert_one_line_error(run("sample.py", "--out_dir=out", "--device=cpu", cwd=tmp_path, check=False), *fragments)


def test_ctrl_c_is_one_line(workdir):
    assert_interrupted(interrupted_at("torch", "load", "sample.py", "--out_dir=out_full", cwd=workdir))


@pytest.mark.parametrize("error", [  # a CPU's, and the same on CUDA
    "RuntimeError('[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can\\'t allocate memory: you "
    "tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)')",
    "torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.1 "
    "GiB of which 70.2 GiB is free.')"])
def test_out_of_memory_is_one_line_naming_the_settings_to_lower(workdir, error):
    result = raising_at("torch.nn.functional", "scaled_dot_product_attention", error, "sample.py",
                        "--out_dir=out_full", "--num_samples=1000000", "--device=cpu", cwd=workdir)
    assert_one_line_error(result, "out of memory (", "allocate", "lower --num_samples or --max_new_tokens")


def test_a_tiny_temperature_samples_the_greedy_tokens_instead_of_overflowing(workdir):
    common = ["--out_dir=out_full", "--start=the river", "--num_samples=1", "--max_new_tokens=20", "--device=cpu"]
    tiny = run("sample.py", *common, "--temperature=1e-30", cwd=workdir)
    greedy = run("sample.py", *common, "--top_k=1", cwd=workdir)
    assert tiny.stdout == greedy.stdout


def test_sample_with_a_compiled_decoding_step_prints_the_eager_greedy_text(workdir):
    args = ["--out_dir=out_full", "--start=the castle", "--num_samples=1", "--max_new_tokens=12", "--top_k=1",
            "--device=cpu"]
    assert run("sample.py", *args, "--compile", cwd=workdir).stdout == run("sample.py", *args, cwd=workdir).stdout
