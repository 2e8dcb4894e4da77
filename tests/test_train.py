"""Specifications of train.py: exact resumes and DDP, its log and checkpoint, and its faults and bad inputs, each
ending in one line naming the problem and the fix, or in correct behaviour, with no file lost. CPU only, no network.

    python -m pytest -q tests/test_train.py

train.py runs as a subprocess on a tiny model and a small generated text, prepared with prepare_wikipedia.py
(--tokenizer byte): conftest.py's workdir. A full disk is a small tmpfs (small_disk: needs root, else skipped);
Ctrl-C is SIGINT. (Config files and --help: test_configurator.py; a broken dataset or log:
test_data.py; the reversal demo: test_reversal.py.)
"""
import glob
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest
import torch

from conftest import (ENV, ROOT, TINY, assert_interrupted, assert_one_line_error, copy_run, fill, interrupted_at,
                      killed_write, log, raising_at, run, stops_at_their_defaults, train)



def losses(records):
    keys = ("iter", "train_loss", "val_loss", "train_embedding_loss", "val_embedding_loss", "grad_norm")
    return [tuple(r[k] for k in keys) for r in records]


def files(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}

# -----------------------------------------------------------------------------
# what a run writes, and resuming it


def test_resumed_run_logs_exactly_the_losses_of_an_uninterrupted_run(workdir):
    train(workdir, "out_resumed", "--max_iters=4")
    with open(workdir / "out_resumed" / "log.jsonl", "a") as f:  # logged after the checkpoint by a run that then died
        f.write(json.dumps({"iter": 6, "train_loss": 99.0}) + "\n")
    # the checkpoint supplies every setting not given again
    run("train.py", "--out_dir=out_resumed", "--init_from=resume", "--max_iters=6", cwd=workdir)
    full, resumed = log(workdir, "out_full"), log(workdir, "out_resumed")
    assert [r["iter"] for r in resumed] == [0, 2, 4, 6]
    assert losses(resumed) == losses(full)
    assert full[-1]["train_loss"] < full[0]["train_loss"]  # it did learn something


def test_a_resume_with_dropout_logs_the_losses_of_an_unbroken_run_with_no_random_state_saved(workdir):
    """Dropout's masks are a step's only random draws, seeded from (seed, iteration, micro-step): the random
    generator's state when the checkpoint was written does not matter, and is not saved."""
    train(workdir, "out_dropout_unbroken", "--max_iters=4", "--dropout=0.2")
    train(workdir, "out_dropout_resumed", "--max_iters=2", "--dropout=0.2")
    assert "rng" not in torch.load(workdir / "out_dropout_resumed" / "ckpt.pt", weights_only=True)
    run("train.py", "--out_dir=out_dropout_resumed", "--init_from=resume", "--max_iters=4", cwd=workdir)
    assert losses(log(workdir, "out_dropout_resumed")) == losses(log(workdir, "out_dropout_unbroken"))


def test_another_runs_checkpoint_in_a_runs_folder_is_resumed_as_the_record_and_the_folders_log_kept_whole(
        workdir, tmp_path):
    """A baseline's ckpt.pt (iteration 2) copied over an encoder-decoder run's (iteration 6): the checkpoint is the
    run's record, so the resume goes on from it, with its log; the folder's log is kept whole beside it."""
    out = copy_run(workdir, tmp_path)
    train(tmp_path, "baseline", "--variant=baseline", "--max_iters=2")
    shutil.copy(tmp_path / "baseline" / "ckpt.pt", out / "ckpt.pt")
    before = (out / "log.jsonl").read_text()
    result = run("train.py", "--out_dir=out", "--init_from=resume", "--max_iters=4", cwd=tmp_path)
    assert f"out{os.sep}log.jsonl: set aside whole as out{os.sep}log.jsonl.aside1" in result.stdout
    assert (out / "log.jsonl.aside1").read_text() == before
    assert "\nbaseline: " in result.stdout
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4]
    assert log(tmp_path, "out")[:2] == log(tmp_path, "baseline")


def test_a_resume_sets_aside_what_was_logged_after_its_checkpoint_and_says_so(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)  # its checkpoint is at iteration 6
    later = json.dumps({"iter": 8, "train_loss": 99.0, "val_loss": 99.0}) + "\n"  # logged by a run that then died
    with open(out / "log.jsonl", "a") as f:
        f.write(later)
    before = (out / "log.jsonl").read_text()
    result = run("train.py", "--out_dir=out", "--init_from=resume", "--max_iters=8", cwd=tmp_path)
    assert (f"out{os.sep}log.jsonl: set aside whole as out{os.sep}log.jsonl.aside1; it differs from this run's "
            "log") in result.stdout
    assert (out / "log.jsonl.aside1").read_text() == before
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4, 6, 8] and log(tmp_path, "out")[-1]["val_loss"] < 99


def test_a_step_split_into_other_micro_batches_trains_the_same_weights(workdir):
    """batch_size x gradient_accumulation_steps sequences per step, drawn by (seed, iteration) alone: 4 x 2 (out_full),
    8 x 1 and 2 x 4 give the same gradients and weights, to float rounding."""
    full = torch.load(workdir / "out_full" / "ckpt.pt", weights_only=True)
    for batch_size, steps in ((8, 1), (2, 4)):
        out = f"out_split_{batch_size}x{steps}"
        train(workdir, out, "--max_iters=6", f"--batch_size={batch_size}", f"--gradient_accumulation_steps={steps}")
        grad_norms = [r["grad_norm"] for r in log(workdir, out)][1:]
        np.testing.assert_allclose(grad_norms, [r["grad_norm"] for r in log(workdir, "out_full")][1:], rtol=1e-5)
        weights = torch.load(workdir / out / "ckpt.pt", weights_only=True)["model"]
        for name, w in full["model"].items():
            torch.testing.assert_close(weights[name], w, rtol=1e-4, atol=1e-6)


def test_log_records_every_eval_with_its_fields(workdir):
    records = log(workdir, "out_full")
    assert [r["iter"] for r in records] == [0, 2, 4, 6]
    tokens_per_iter = 2 * 4 * 32
    for r in records:
        assert r["tokens"] == r["iter"] * tokens_per_iter
        assert set(r) >= {"train_loss", "val_loss", "train_embedding_loss", "val_embedding_loss", "lr", "grad_norm",
                          "tokens_per_sec", "mfu"}
        assert r["val_embedding_loss"] > 0  # the encdec default has the MSE embedding loss
    assert records[0]["tokens_per_sec"] is None and records[-1]["tokens_per_sec"] > 0 and 0 < records[-1]["mfu"]


def test_checkpoint_holds_what_a_resume_needs(workdir):
    checkpoint = torch.load(workdir / "out_full" / "ckpt.pt", weights_only=True)
    assert checkpoint["iter_num"] == 6
    assert checkpoint["model_config"]["n_layer"] == 1 and checkpoint["model_config"]["embedding_loss"] == "mse"
    assert checkpoint["train_config"]["batch_size"] == 4 and checkpoint["train_config"]["dataset"] == "tiny"
    assert {"model", "optimizer", "best_val_loss"} <= set(checkpoint)
    assert not glob.glob(str(workdir / "out_full" / "*.tmp"))  # written to a temporary file, then renamed


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_two_process_ddp_logs_the_losses_of_one_process_with_the_same_global_batch(workdir):
    # dropout too: its masks, like the batches, depend only on (seed, iteration, micro-step)
    args = [*TINY, "--max_iters=4", "--gradient_accumulation_steps=4", "--dropout=0.1"]
    run("train.py", *args, "--out_dir=out_single", cwd=workdir)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             os.path.join(ROOT, "train.py"), *args, "--out_dir=out_ddp"],
                            cwd=workdir, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    single, ddp = losses(log(workdir, "out_single")), losses(log(workdir, "out_ddp"))
    assert [r[0] for r in ddp] == [0, 2, 4]
    np.testing.assert_allclose(np.array(ddp, dtype=float), np.array(single, dtype=float), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_ddp_stop_on_rank_0_ends_every_process_with_its_one_line(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    before = (out / "ckpt.pt").read_bytes()
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             os.path.join(ROOT, "train.py"), *TINY, "--out_dir=out", "--init_from=resume",
                             "--max_iters=10", "--learning_rate=1e30", "--log_interval=1000"],  # at rank 0's eval
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    # one line from the processes, no traceback of theirs; torchrun itself then reports their exit status 1
    assert [line[:18] for line in result.stderr.splitlines() if line.startswith(("error", "interrupted"))] == [
        "error: non-finite "], result.stderr
    assert 'train.py", line' not in result.stderr and "Connection closed" not in result.stderr, result.stderr
    assert (out / "ckpt.pt").read_bytes() == before


def test_each_dataset_has_its_own_default_out_dir(workdir):
    run("train.py", *TINY, "--max_iters=0", cwd=workdir)
    assert os.path.exists(workdir / "out" / "tiny" / "ckpt.pt")


def test_resume_with_another_batch_size_logs_the_true_token_count(workdir, tmp_path):
    copy_run(workdir, tmp_path)  # 6 iterations of 2 x 4 x 32 tokens
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8", "--batch_size=8")
    assert [r["tokens"] for r in log(tmp_path, "out")][-2:] == [6 * 2 * 4 * 32, 6 * 2 * 4 * 32 + 2 * 2 * 8 * 32]


def test_progress_comes_after_the_first_step_with_an_eta(workdir):
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *TINY, "--out_dir=out_long",
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
    assert re.search(r"ETA [\d.]+ (days|h)$", lines[-1].strip()), lines[-1]  # 10^8 steps


def test_mfu_above_100_percent_says_why(workdir, tmp_path):
    """A CPU busy while its matmul peak was timed gives too low a peak (MFU was printed as 131-155%): the line says
    why. Here the timing is given: 1 GFLOP/s."""
    argv = ["train.py", *TINY, "--max_iters=2", f"--out_dir={tmp_path / 'out'}"]
    code = (f"import machinery.hardware, runpy, sys\n"
            f"machinery.hardware.matmul_peak = lambda *args, **kwargs: 1e3\n"
            f"sys.argv = {argv!r}\nrunpy.run_path({os.path.join(ROOT, 'train.py')!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=ENV, capture_output=True, text=True)
    mfus = [float(m) for m in re.findall(r"mfu ([\d.]+)%", result.stdout)]
    assert result.returncode == 0 and len(mfus) == 2 and all(m > 100 for m in mfus), result.stdout + result.stderr
    assert result.stdout.count("above 100%: the CPU was busy while its peak was timed") == 2

# -----------------------------------------------------------------------------
# precision: the code paths of a GPU (bfloat16 and float16 autocast, the gradient scaler), run on the CPU


@pytest.mark.parametrize("variant", ["baseline", "encdec", "parallel"])
def test_autocast_dtypes_train_every_variant_to_finite_losses_close_to_float32(workdir, variant):
    runs = {}
    for dtype in ("float32", "bfloat16", "float16"):
        train(workdir, f"out_{variant}_{dtype}", f"--variant={variant}", f"--dtype={dtype}", "--max_iters=4")
        runs[dtype] = log(workdir, f"out_{variant}_{dtype}")
    for dtype in ("bfloat16", "float16"):  # after 4 steps, within 1% of float32 (bfloat16 keeps 8 bits of mantissa)
        assert all(math.isfinite(x) for r in losses(runs[dtype]) for x in r[1:] if x is not None)
        np.testing.assert_allclose([r[1:3] for r in losses(runs[dtype])], [r[1:3] for r in losses(runs["float32"])],
                                   rtol=0.01)
    assert [r["grad_scale"] for r in runs["float16"]] == [65536.0] * 3 and "grad_scale" not in runs["bfloat16"][0]


def test_float16_run_resumed_with_its_scaler_logs_exactly_the_losses_of_an_uninterrupted_one(workdir):
    train(workdir, "out_fp16_full", "--dtype=float16", "--max_iters=6")
    train(workdir, "out_fp16_resumed", "--dtype=float16", "--max_iters=4")
    scaler = torch.load(workdir / "out_fp16_resumed" / "ckpt.pt", weights_only=True)["scaler"]
    assert scaler["scale"] == 65536.0 and scaler["_growth_tracker"] == 4  # 4 good steps: the scaler's own count
    # the checkpoint's dtype, not the default's (float32 here): exactly the run it was
    result = run("train.py", "--out_dir=out_fp16_resumed", "--init_from=resume", "--max_iters=6", cwd=workdir)
    assert "(1 process, cpu, float16); resuming at iteration 4" in result.stdout
    assert losses(log(workdir, "out_fp16_resumed")) == losses(log(workdir, "out_fp16_full"))


def test_float16_steps_the_scaler_skips_are_logged_not_taken_for_divergence(workdir):
    # a scale of 2**40 overflows float16 gradients: every step is skipped and the scale halves, the loss stays finite
    argv = [os.path.join(ROOT, "train.py"), *TINY, "--out_dir=out_fp16_skipped", "--dtype=float16", "--max_iters=4"]
    code = ("import functools, runpy, sys, torch; "
            "torch.amp.GradScaler = functools.partial(torch.amp.GradScaler, init_scale=2.0 ** 40); "
            f"sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=ENV, capture_output=True, text=True)
    assert result.returncode == 0 and "non-finite" not in result.stderr, result.stderr
    records = log(workdir, "out_fp16_skipped")
    assert [r["grad_scale"] for r in records] == [2.0 ** 40, 2.0 ** 38, 2.0 ** 36]
    assert not math.isfinite(records[-1]["grad_norm"]) and records[-1]["train_loss"] == records[0]["train_loss"]
    assert "(float16 grad scale 68719476736)" in result.stdout  # the scale of each step is in its line


def test_resume_keeps_the_device_and_dtype_of_its_checkpoint_unless_told(workdir, tmp_path):
    copy_run(workdir, tmp_path)  # trained with --device=cpu, in float32
    argv = [os.path.join(ROOT, "train.py"), "--out_dir=out", "--init_from=resume", "--max_iters=8"]
    on_a_cuda_machine = (  # as an A100 looks to --device=auto and --dtype=auto: cuda, bfloat16
        "import runpy, sys, torch; torch.cuda.is_available = lambda: True; torch.cuda.device_count = lambda: 1; "
        f"torch.cuda.get_device_capability = lambda *args: (8, 0); sys.argv = {argv!r}; "
        "runpy.run_path(sys.argv[0], run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", on_a_cuda_machine], cwd=tmp_path, env=ENV, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "(1 process, cpu, float32); resuming at iteration 6" in result.stdout and "note:" not in result.stdout
    assert [r["iter"] for r in log(tmp_path, "out")][-1] == 8
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=10", "--dtype=bfloat16")
    assert "(1 process, cpu, bfloat16); resuming at iteration 8" in result.stdout


@pytest.mark.parametrize("variant", ["baseline", "encdec", "parallel"])
def test_compiled_training_logs_the_losses_of_eager_training(workdir, variant):
    # heads of 15, as the write-up's cross-attention (odd sizes once tripped the compiler); parallel: rotary positions
    shape = ["--n_embed=30", "--n_head=2"] + ["--cross_n_head=2"] * (variant != "baseline")
    shape += ["--rotary=True"] * (variant == "parallel")
    for mode in ("eager", "compiled"):
        result = train(workdir, f"out_{variant}_{mode}", f"--variant={variant}", *shape, "--max_iters=2",
                       "--eval_iters=1", f"--compile={mode == 'compiled'}", timeout=600)
        assert "warning" not in result.stderr, result.stderr  # compiled: not a run that fell back to eager
    compiled, eager = losses(log(workdir, f"out_{variant}_compiled")), losses(log(workdir, f"out_{variant}_eager"))
    # the compiler fuses and reorders float32 arithmetic: the same losses to 1e-4, not to the bit
    np.testing.assert_allclose(np.array(compiled, dtype=float), np.array(eager, dtype=float), rtol=1e-4)

# -----------------------------------------------------------------------------
# the machine: no C++ compiler, too little memory, Windows (no fcntl, no load average, a console's code page)


def assert_compile_failure_is_one_line(result, *fragments):
    """A run whose torch.compile failed: one line naming --compile=False, nothing saved."""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: torch.compile could not build the model (") and "use --compile=False" in line, line
    assert line.endswith("no checkpoint was saved yet"), line
    for fragment in fragments:
        assert fragment in line, line


def test_compile_without_a_cpp_compiler_is_one_line_naming_the_fix(workdir, tmp_path):
    # a cache of its own: a kernel compiled by another test would need no compiler
    env = {"CXX": "/nonexistent/g++", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    result = train(workdir, "out_no_cxx/run", "--max_iters=2", "--compile=True", check=False, env=env)
    assert_compile_failure_is_one_line(result, "install a C++ compiler")
    assert os.listdir(workdir / "out_no_cxx" / "run") == []  # the folder it made; no file


def test_a_compiler_bug_of_any_torch_release_is_one_line_naming_compile_false(workdir):
    """As torch 2.11's inductor failed on one GPU: an error of any class inside the compiler's backend."""
    result = raising_at("torch._inductor.compile_fx", "compile_fx",
                        "TypeError('list indices must be integers or slices, not NoneType')", "train.py", *TINY,
                        "--out_dir=out_compiler_bug", "--max_iters=2", "--compile=True", cwd=workdir)
    assert_compile_failure_is_one_line(result, "(TypeError: list indices must be integers")
    assert "install a C++ compiler" not in result.stderr


@pytest.mark.parametrize("error", [  # a CPU's, and the same on CUDA
    "RuntimeError('[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can\\'t allocate memory: you "
    "tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)')",
    "torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.1 "
    "GiB of which 70.2 GiB is free.')"])
def test_out_of_memory_is_one_line_naming_the_settings_to_lower(workdir, tmp_path, error):
    copy_run(workdir, tmp_path)
    result = raising_at("torch.nn.functional", "scaled_dot_product_attention", error, "train.py", *TINY,
                        "--out_dir=out", "--init_from=resume", "--max_iters=8", cwd=tmp_path)
    assert_one_line_error(result, "out of memory (", "allocate", "lower --batch_size", "--context_size",
                          "the last checkpoint is out/ckpt.pt (iteration 6)", "--init_from=resume`")


def test_train_and_sample_run_without_fcntl_or_load_average_on_a_console_that_cannot_show_their_text(workdir, tmp_path):
    shim = tmp_path / "windows"  # what Windows lacks, taken away at every start
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import os, sys\nsys.modules['fcntl'] = None\ndel os.getloadavg\n")
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{ROOT}", "PYTHONIOENCODING": "ascii"}  # a code page without é
    result = train(workdir, "out-café", "--max_iters=2", env=env)
    assert "warning" not in result.stdout  # filelock's lock without fcntl is a lock all the same
    assert "checkpoint and log in out-caf\\xe9/" in result.stdout
    result = run("sample.py", "--out_dir=out-café", "--start=café", "--num_samples=1", "--max_new_tokens=20",
                 "--device=cpu", cwd=workdir, env=env)
    assert result.stdout.startswith("caf\\xe9")

# -----------------------------------------------------------------------------
# Weights & Biases, optional


def test_wandb_log_records_each_evaluation_offline(workdir, tmp_path):
    pytest.importorskip("wandb")
    train(workdir, "out_wandb", "--max_iters=2", "--wandb_log=True", "--wandb_run_name=tiny-run",
          env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"})
    [history] = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    data = open(history, "rb").read()  # wandb's own record format: the names and values it would upload
    assert b"tiny-run" in data and b"val_loss" in data and b"train_loss" in data


def test_wandb_log_without_the_package_is_one_line_error(workdir, tmp_path):
    hidden = tmp_path / "hide" / "wandb"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    result = train(workdir, "out_no_wandb", "--max_iters=2", "--wandb_log=True", check=False,
                   env={"PYTHONPATH": f"{hidden.parent}{os.pathsep}{ROOT}"})
    # the fix that also works on a resume, where the checkpoint says wandb_log=True
    assert_one_line_error(result, "wandb_log=True", "pip install wandb", "--wandb_log=False")
    assert not os.path.exists(workdir / "out_no_wandb" / "ckpt.pt")


@pytest.fixture
def fake_wandb(tmp_path):
    """A stand-in `wandb` package first on the path: it records its calls in tmp_path/wandb_calls.jsonl, and its init
    raises what FAKE_WANDB_ERROR says, as the real one does without an API key or a network. Returns (env, calls)."""
    package = tmp_path / "fake" / "wandb"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import json, os\n"
        "def record(*call):\n"
        "    with open(os.environ['FAKE_WANDB_CALLS'], 'a') as f:\n"
        "        f.write(json.dumps(call) + '\\n')\n"
        "class UsageError(Exception):\n    pass\n"
        "class Config:\n    def update(self, settings, allow_val_change=False):\n        record('config', settings)\n"
        "class Run:\n    def __init__(self, id):\n        self.id, self.config = id, Config()\n"
        "    def log(self, values, step):\n        record('log', step)\n"
        "def init(**kwargs):\n"
        "    if os.environ.get('FAKE_WANDB_ERROR'):\n        raise UsageError(os.environ['FAKE_WANDB_ERROR'])\n"
        "    record('init', kwargs)\n    return Run(kwargs.get('id') or 'run-%d' % os.getpid())\n")
    calls_path = tmp_path / "wandb_calls.jsonl"
    env = {"PYTHONPATH": f"{package.parent}{os.pathsep}{ROOT}", "FAKE_WANDB_CALLS": str(calls_path)}
    return env, lambda: [json.loads(line) for line in open(calls_path)] if calls_path.exists() else []


def test_wandb_starts_after_every_check_and_a_resume_goes_on_in_the_same_wandb_run(workdir, fake_wandb):
    env, calls = fake_wandb
    result = train(workdir, "out_wandb_err", "--wandb_log=True", "--dataset=nowhere", check=False, env=env)
    assert_one_line_error(result, "dataset 'nowhere' not found")
    assert calls() == []  # no W&B run for a run that never started
    train(workdir, "out_wandb_resumed", "--max_iters=2", "--wandb_log=True", env=env)
    [(_, first)] = [call for call in calls() if call[0] == "init"]
    assert first["id"] is None and first["name"] == "out_wandb_resumed"
    run("train.py", "--out_dir=out_wandb_resumed", "--init_from=resume", "--max_iters=4", cwd=workdir, env=env)
    inits = [kwargs for kind, kwargs in calls() if kind == "init"]
    run_id = torch.load(workdir / "out_wandb_resumed" / "ckpt.pt", weights_only=True)["wandb_run_id"]
    assert run_id.startswith("run-") and inits[1]["id"] == run_id and inits[1]["resume"] == "allow"
    assert [step for kind, step in calls() if kind == "log"] == [0, 2, 4]


def test_wandb_that_cannot_start_is_one_line_naming_the_fixes_and_writes_nothing(workdir, fake_wandb):
    env, _ = fake_wandb
    error = "api_key not configured (no-tty). call wandb.login(key=[your_api_key])"
    result = train(workdir, "out_wandb_no_key", "--wandb_log=True", check=False, env={**env, "FAKE_WANDB_ERROR": error})
    assert_one_line_error(result, f"W&B could not start (UsageError: {error})", "`wandb login`",
                          "WANDB_MODE=offline", "--wandb_log=False")
    assert os.listdir(workdir / "out_wandb_no_key") == []  # the folder it made, empty (no folder is ever removed)

# -----------------------------------------------------------------------------
# a new run in an existing folder


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
    earlier = (out / "log.jsonl").read_text()
    result = train(tmp_path, "out", "--max_iters=2", "--overwrite=True")
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2]
    assert (out / "log.jsonl.aside1").read_text() == earlier  # replaced, not lost
    assert f"out{os.sep}log.jsonl: set aside whole as out{os.sep}log.jsonl.aside1" in result.stdout


def test_run_from_scratch_refuses_a_folder_with_a_log_but_no_checkpoint_unless_told(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)  # as a study's committed logs are: no checkpoint beside them
    os.remove(out / "ckpt.pt")
    before = files(out)
    result = train(tmp_path, "out", "--max_iters=2", check=False)
    assert_one_line_error(result, "log.jsonl", "--overwrite=True")
    assert "--init_from=resume" not in result.stderr  # no checkpoint to resume
    assert files(out) == before
    train(tmp_path, "out", "--max_iters=2", "--overwrite=True")
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2]

# -----------------------------------------------------------------------------
# values that would train wrongly or crash


@pytest.mark.parametrize("setting", [
    "grad_clip=-1", "batch_size=0", "batch_size=-1", "eval_iters=-1", "eval_interval=0", "log_interval=0",
    "gradient_accumulation_steps=0", "seed=-1", "learning_rate=-1", "learning_rate=1e999", "beta2=1.5", "device=foo",
    "device=gpu", "device=mps", "device=cuda", "device=cuda:1", "dtype=half"])
def test_setting_out_of_range_is_one_line_error(workdir, setting):
    key, value = setting.split("=")
    assert_one_line_error(train(workdir, "out_err", f"--{setting}", "--max_iters=2", check=False), f"{key}=")
    assert not os.path.exists(workdir / "out_err")


def test_whole_split_evaluation_is_refused_for_reversal(tmp_path):
    result = run("train.py", "--dataset=reversal", "--eval_iters=0", "--device=cpu", cwd=tmp_path, check=False)
    # eval_iters=0 reads every token of val.bin, which reversal has not
    assert_one_line_error(result, "eval_iters=0", "reversal")


def test_invalid_model_flag_is_one_line_error(workdir):
    assert_one_line_error(train(workdir, "out_err", "--embedding_loss=l1", check=False), "embedding_loss", "mse")


def test_gpt2_tokens_for_a_byte_config_say_how_to_prepare_bytes(workdir, tmp_path):
    os.makedirs(tmp_path / "data")
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    meta = json.loads((tmp_path / "data" / "tiny" / "meta.json").read_text())
    (tmp_path / "data" / "tiny" / "meta.json").write_text(json.dumps({**meta, "tokenizer": "gpt2",
                                                                      "vocab_size": 50257}))
    result = train(tmp_path, "out", "--vocab_size=256", check=False)
    assert_one_line_error(result, "vocab_size=256", "50257", "--tokenizer=byte")

# -----------------------------------------------------------------------------
# checkpoints that cannot be resumed, and a run that diverges


@pytest.mark.parametrize("change, fragments", [
    (lambda c: c["model_config"].update(n_kv_head=2), ["n_kv_head"]),  # a field since removed, or yet to come
    (lambda c: c.pop("iter_num"), ["has no iter_num of the kind this code reads"]),
    (lambda c: c.update(log=[{"iter": "6"}]), ["has no log of the kind this code reads"]),
    (lambda c: c.update(tokens=1.5), ["has no tokens of the kind this code reads"]),
    (lambda c: c["train_config"].pop("dataset"), ["has no train_config of the kind this code reads"]),
    # what it trained on: its tokenizer, or a task that is its dataset (the scripts read one record alike)
    (lambda c: c.update(dataset_meta={}), ["has no dataset_meta of the kind"]),
    (lambda c: c["dataset_meta"].pop("tokenizer"), ["has no dataset_meta of the kind"]),
    (lambda c: c.update(dataset_meta={"task": "reversal"}), ["has no dataset_meta of the kind"]),
    (lambda c: c["dataset_meta"].update(train_token_sum=torch.ones(2)), ["has no record of the kind"]),
    (lambda c: c["log"][-1].update(val_loss=torch.tensor(1.0)), ["has no record of the kind"]),
    (lambda c: c["model_config"].update({5: 1}), ["model.py"]),
    (lambda c: c.update(grad_norm="x"), ["has no grad_norm of the kind"]),
], ids=["extra_model_config_key", "no_iter_num", "iter_a_string", "tokens_a_float", "no_dataset", "no_dataset_meta",
        "no_tokenizer", "a_task_that_is_not_its_dataset", "a_tensor_in_dataset_meta", "a_tensor_in_the_log",
        "a_model_config_key_not_a_name", "grad_norm_a_string"])
def test_a_checkpoint_another_version_wrote_is_one_line_in_resume_sample_and_evaluate(workdir, tmp_path, change,
                                                                                        fragments):
    out = copy_run(workdir, tmp_path)
    checkpoint = torch.load(out / "ckpt.pt", weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, out / "ckpt.pt")
    before = files(out)
    for script, args in [("train.py", ["--init_from=resume", "--max_iters=8"]), ("sample.py", []),
                         ("evaluate.py", [])]:
        result = run(script, "--out_dir=out", "--device=cpu", *args, cwd=tmp_path, check=False)
        assert_one_line_error(result, f"out{os.sep}ckpt.pt", *fragments)
    assert files(out) == before


@pytest.mark.parametrize("change, fragment", [
    (lambda c: c["train_config"].update(learning_rate=None), "learning_rate=None in out/ckpt.pt's train_config has "
                                                            "the wrong type"),
    (lambda c: c["train_config"].update(seed="1337"), "seed='1337' in out/ckpt.pt's train_config has the wrong type"),
    (lambda c: c["model"].popitem(), "the checkpoint's weights or state do not fit this run"),
    (lambda c: c.update(optimizer={"state": {}, "param_groups": []}), "do not fit this run (ValueError"),
], ids=["learning_rate_none", "seed_a_string", "a_weight_missing", "optimizer_of_another_model"])
def test_a_checkpoint_whose_settings_or_state_do_not_fit_is_one_line_at_resume(workdir, tmp_path, change, fragment):
    out = copy_run(workdir, tmp_path)
    checkpoint = torch.load(out / "ckpt.pt", weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, out / "ckpt.pt")
    result = run("train.py", "--out_dir=out", "--init_from=resume", "--max_iters=8", cwd=tmp_path, check=False)
    assert_one_line_error(result, fragment)


def test_corrupt_checkpoint_is_refused(workdir):
    shutil.copytree(workdir / "out_full", workdir / "out_corrupt")
    path = workdir / "out_corrupt" / "ckpt.pt"
    path.write_bytes(path.read_bytes()[:5000])
    result = train(workdir, "out_corrupt", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "unreadable")


def flip_bytes_inside_a_tensor(path):
    """Change 8 bytes in the middle of the largest record of the checkpoint (a zip file): a disk or copy error
    that torch.load would not notice; returns the record's name."""
    with zipfile.ZipFile(path) as archive:
        record = max(archive.infolist(), key=lambda info: info.file_size)
    data = bytearray(path.read_bytes())
    # the record's data follow its 30-byte local header, its name and its extra field
    start = record.header_offset + 30 + int.from_bytes(data[record.header_offset + 26:record.header_offset + 28],
                                                       "little") \
        + int.from_bytes(data[record.header_offset + 28:record.header_offset + 30], "little")
    middle = start + record.file_size // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    path.write_bytes(bytes(data))
    return record.filename


def test_a_damaged_checkpoint_is_refused_by_resume_sample_and_evaluate_naming_its_record(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    record = flip_bytes_inside_a_tensor(out / "ckpt.pt")
    assert torch.load(out / "ckpt.pt", weights_only=True)  # torch.load itself reads it without a word
    for script, args in (("train.py", [*TINY, "--out_dir=out", "--init_from=resume", "--max_iters=8"]),
                         ("sample.py", ["--out_dir=out", "--device=cpu"]),
                         ("evaluate.py", ["--out_dir=out", "--device=cpu"])):
        result = run(script, *args, cwd=tmp_path, check=False)
        assert_one_line_error(result, "out/ckpt.pt is damaged", f"its record {record} fails its CRC-32 check")


def test_a_dataset_whose_meta_json_is_a_folder_is_one_line_error(workdir, tmp_path):
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    (tmp_path / "data" / "tiny" / "meta.json").unlink()
    (tmp_path / "data" / "tiny" / "meta.json").mkdir()
    result = train(tmp_path, "out", check=False)
    assert_one_line_error(result, "data/tiny/meta.json is not a JSON object", "prepare the dataset again")


def test_missing_or_mismatched_checkpoint_is_refused(workdir):
    assert_one_line_error(train(workdir, "out_none", "--init_from=resume", check=False), "no checkpoint")
    result = train(workdir, "out_full", "--init_from=resume", "--max_iters=8", "--n_layer=2", check=False)
    assert_one_line_error(result, "n_layer=1", "n_layer=2")
    result = train(workdir, "out_full", "--init_from=resume", "--max_iters=8", "--dataset=reversal", check=False)
    assert_one_line_error(result, "tiny", "reversal")


def test_resume_with_another_seed_is_refused(workdir, tmp_path):
    copy_run(workdir, tmp_path)
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", "--seed=7", check=False)
    assert_one_line_error(result, "seed=1337", "drop --seed")


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(workdir):
    shutil.copytree(workdir / "out_full", workdir / "out_nan")
    path = workdir / "out_nan" / "ckpt.pt"
    before = path.read_bytes()
    result = train(workdir, "out_nan", "--init_from=resume", "--max_iters=10", "--learning_rate=1e30", check=False)
    assert_one_line_error(result, "non-finite")
    assert path.read_bytes() == before
    assert [r["iter"] for r in log(workdir, "out_nan")] == [0, 2, 4, 6]

# -----------------------------------------------------------------------------
# a full disk, Ctrl-C


def test_log_rewrite_on_a_full_disk_keeps_the_old_log(workdir, small_disk):
    disk = small_disk("disk", 2048)
    out = copy_run(workdir, disk)
    with open(out / "log.jsonl", "a") as f:  # logged after the checkpoint: the resume sets it aside
        f.write(json.dumps({"iter": 8, "train_loss": 99.0}) + "\n")
    before = files(out)
    fill(disk)
    result = train(disk, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "No space left on device", "the other files of out are as they were")
    assert files(out) == before  # no temporary file left


def test_full_disk_while_saving_is_one_line_and_keeps_the_previous_checkpoint(workdir, small_disk):
    disk = small_disk("disk", 2048)
    out = copy_run(workdir, disk)
    checkpoint = (out / "ckpt.pt").read_bytes()
    fill(disk, leave=16384)  # room for the log, not for a second checkpoint
    result = train(disk, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "No space left on device", "free some space",
                          "the last checkpoint is out/ckpt.pt (iteration 6)", "--init_from=resume")
    assert (out / "ckpt.pt").read_bytes() == checkpoint
    assert sorted(os.listdir(out)) == ["ckpt.pt", "log.jsonl"]


def test_the_temporary_file_of_a_killed_write_is_replaced_by_the_next_write_and_no_other(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    left = killed_write(out / "ckpt.pt")
    mine = ("notes.tmp", "ckpt.pt.tmp", "draft.partial", "report.2024.partial", "draft.1.partial")  # the user's
    for name in mine:
        (out / name).write_text("mine")
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert left == "ckpt.pt.partial" and not (out / left).exists()
    assert [r["iter"] for r in log(tmp_path, "out")][-1] == 8
    assert all((out / name).read_text() == "mine" for name in mine)


def test_a_lock_note_that_is_a_link_is_replaced_never_written_through(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    (tmp_path / "precious.txt").write_text("mine")
    os.symlink(tmp_path / "precious.txt", out / ".lock")
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert (tmp_path / "precious.txt").read_text() == "mine"


def test_an_out_dir_that_is_the_runs_own_dataset_folder_is_refused(workdir, tmp_path):
    """The run reads data/tiny, holding it beside other readers; as its --out_dir it would need it alone (a second
    run with --overwrite=True there could delete the first's checkpoint), however the path names it."""
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    before = sorted(os.listdir(tmp_path / "data" / "tiny"))
    for out_dir in ("data/tiny", "data/x/../tiny/", os.path.join(tmp_path, "data", "tiny")):
        result = train(tmp_path, out_dir, "--max_iters=2", "--overwrite=True", check=False)
        assert_one_line_error(result, "holds the data this run reads; use another --out_dir")
    assert sorted(os.listdir(tmp_path / "data" / "tiny")) == before
    assert os.listdir(tmp_path / "data" / "x") == []  # made on the way, never removed


def test_a_second_process_in_the_same_out_dir_is_refused_saying_who_holds_it_until_the_first_dies(workdir):
    first = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *TINY, "--out_dir=out_held",
                              "--max_iters=1000000", "--eval_interval=1000000"], cwd=workdir,  # its checkpoint: 0
                             env={**ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, text=True)
    for line in first.stdout:  # it holds the folder once it trains
        if line.startswith("iter "):
            break
    second = train(workdir, "out_held", "--max_iters=2", "--overwrite=True", check=False)
    assert_one_line_error(second, "out_held is in use by pid", str(first.pid), "wait for it")
    # its checkpoint is there, but the first thing to say is that the folder is in use
    assert_one_line_error(train(workdir, "out_held", "--max_iters=2", check=False), "out_held is in use by pid")
    resumed = train(workdir, "out_held", "--init_from=resume", "--max_iters=2", check=False)
    assert_one_line_error(resumed, "out_held is in use by pid")
    first.kill()  # kill -9: the lock goes with the process
    first.wait()
    train(workdir, "out_held", "--init_from=resume", "--max_iters=2")


@pytest.mark.parametrize("where, fragment", [
    ("a_file", "(File exists: a_file)"), ("a_file/run", "(Not a directory: a_file/run)"),
    ("read_only/run", "(Read-only file system"), ("broken_link", "(File exists: broken_link)"),
    ("broken_link/run", "(File exists: broken_link)")])
def test_an_out_dir_that_cannot_be_written_is_one_line_error_before_anything_is_made(workdir, small_disk, where,
                                                                                    fragment):
    (workdir / "a_file").write_text("")
    if not os.path.lexists(workdir / "broken_link"):
        os.symlink("nowhere", workdir / "broken_link")
    if where.startswith("read_only"):
        where = str(small_disk("read_only", 64, read_only=True) / "run")
    before = sorted(os.listdir(workdir))
    assert_one_line_error(train(workdir, where, "--max_iters=2", check=False), fragment)
    assert sorted(os.listdir(workdir)) == before


def test_min_lr_above_learning_rate_is_one_line_error(workdir):
    assert_one_line_error(train(workdir, "out_err", "--min_lr=0.01", "--learning_rate=0.001", check=False),
                          "min_lr=0.01", "up to learning_rate")


def test_resume_on_text_prepared_again_is_refused(workdir, tmp_path):
    copy_run(workdir, tmp_path)
    (tmp_path / "other.txt").write_text((workdir / "text.txt").read_text().replace("river", "ocean"))
    run("prepare_wikipedia.py", "--input", "other.txt", "--name", "tiny", "--tokenizer", "byte", "--val_fraction",
        "0.1", cwd=tmp_path)
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, "data/tiny was prepared again", "its text", "prepare_wikipedia.py")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP"])  # Ctrl-C; Colab, docker, Kubernetes; a hang-up
def test_ctrl_c_or_a_stop_signal_saves_the_step_it_came_in_and_says_where(workdir, stop):
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *TINY, f"--out_dir=out_{stop}",
                                "--max_iters=1000000", "--eval_interval=1000000"], cwd=workdir,  # its checkpoint: 0
                               env={**ENV, "PYTHONUNBUFFERED": "1"}, preexec_fn=stops_at_their_defaults(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:  # iteration lines come after eval 0 has saved its checkpoint
            if line.startswith("iter "):
                break
        process.send_signal(getattr(signal, stop))
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()  # a run that missed its stop does not outlive the test (it would train a million steps)
    assert process.returncode != 0
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    iteration = int(re.match(rf"interrupted: the last checkpoint is out_{stop}/ckpt.pt \(iteration (\d+)\)", stderr)[1])
    assert (f"out_{stop}/ckpt.pt (iteration {iteration}); continue with `python train.py --out_dir=out_{stop} "
            f"--init_from=resume`") in stderr
    assert torch.load(workdir / f"out_{stop}" / "ckpt.pt", weights_only=True)["iter_num"] == iteration > 0
    assert sorted(os.listdir(workdir / f"out_{stop}")) == ["ckpt.pt", "log.jsonl"]


def output_lines(process):
    """The lines of process's stdout as they come, in a queue a thread fills (None at the end): a test waits for a
    line with a timeout, never on a clock."""
    lines = queue.Queue()

    def read():
        for line in process.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for(lines, prefix, timeout=120):
    """The next line starting with prefix (lines: output_lines), within timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0, deadline - time.monotonic()))
        assert line is not None, f"the output ended before a line starting with {prefix!r}"
        if line.startswith(prefix):
            return line


@pytest.mark.parametrize("ignored, stop", [("SIGHUP", "SIGTERM"), ("SIGTERM", "SIGINT"), ("SIGINT", "SIGTERM")])
def test_a_signal_ignored_where_the_run_started_as_nohup_ignores_a_hang_up_stays_ignored(tmp_path, ignored, stop):
    """`nohup python train.py ... &` ignores SIGHUP (a shell script's background job, SIGINT too): the terminal closing
    does not stop the run, which trains on; a stop it does not ignore still says where its checkpoint is."""
    ignore = getattr(signal, ignored)
    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--dataset=reversal", "--n_layer=1",
                                "--n_embed=16", "--n_head=2", "--max_iters=1000000", "--log_interval=1",
                                "--device=cpu", "--out_dir=out"], cwd=tmp_path, env={**ENV, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=stops_at_their_defaults([ignored]))
    try:
        lines = output_lines(process)
        wait_for(lines, "iter 1:")
        process.send_signal(ignore)
        wait_for(lines, "iter 3:")  # two steps later: still training
        process.send_signal(getattr(signal, stop))
        assert "interrupted: the last checkpoint is out/ckpt.pt" in wait_for(lines, "interrupted")
        assert process.wait(timeout=60) != 0
    finally:
        process.kill()
        process.wait()


def test_ctrl_c_in_the_first_seconds_is_one_line_too(workdir):
    result = interrupted_at("data", "check_dataset", "train.py", *TINY, "--out_dir=out_early", cwd=workdir)
    assert_interrupted(result, "no checkpoint was saved yet")


def test_ctrl_c_as_a_resume_starts_names_the_checkpoint_it_resumes(workdir, tmp_path):
    """Stopped before its first step, the resumed run's checkpoint is on disk as it was: the line says so."""
    out = copy_run(workdir, tmp_path)
    before = (out / "ckpt.pt").read_bytes()
    result = interrupted_at("data", "check_dataset", "train.py", "--out_dir=out", "--init_from=resume",
                            "--max_iters=8", cwd=tmp_path)
    assert_interrupted(result, "the last checkpoint is out/ckpt.pt (iteration 6)")
    assert (out / "ckpt.pt").read_bytes() == before

# -----------------------------------------------------------------------------
# the numbers: the same before and after the code was reorganised into modules named for what they hold

# out_full's log (TINY, 6 steps): iteration -> (train_loss, val_loss, grad_norm), as train.py logged them before
# its helpers moved into data.py, evaluate.py and machinery/ (exactly: one thread, float32)
PINNED = {0: (5.486755132675171, 5.486254453659058, None),
          2: (5.27762770652771, 5.287602663040161, 7.5881147384643555),
          4: (5.105933904647827, 5.114039182662964, 11.63115406036377),
          6: (4.987625598907471, 4.994441747665405, 12.24592113494873)}


def test_the_logged_losses_are_exactly_those_recorded_before_the_code_moved(workdir):
    assert {r["iter"]: (r["train_loss"], r["val_loss"], r["grad_norm"]) for r in log(workdir, "out_full")} == PINNED


def test_get_lr_warms_up_linearly_then_decays_along_a_cosine_to_min_lr():
    from model import get_lr
    schedule = dict(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, lr_decay_iters=110)
    assert get_lr(0, **schedule) == pytest.approx(1e-3 / 11)  # never 0: the first step learns
    assert get_lr(9, **schedule) == pytest.approx(1e-3 * 10 / 11)
    assert get_lr(10, **schedule) == pytest.approx(1e-3)  # the peak, cos(0)
    assert get_lr(60, **schedule) == pytest.approx((1e-3 + 1e-4) / 2)  # half way down
    assert get_lr(110, **schedule) == get_lr(10 ** 6, **schedule) == 1e-4
    assert all(get_lr(i, **schedule) >= get_lr(i + 1, **schedule) for i in range(10, 200))
    assert get_lr(5, **schedule, decay_lr=False) == get_lr(500, **schedule, decay_lr=False) == 1e-3

# -----------------------------------------------------------------------------
# a stop that saves, a finished run, a lost log, a changed evaluation


def run_with_hook(hook, *args, cwd, env=None):
    """train.py with args in cwd, after `hook` (Python source) ran in its process, with the stop signals at their
    defaults (a CI job started with nohup would ignore SIGHUP)."""
    code = (f"import os, runpy, signal, sys, time, torch\n{hook}\n"
            f"sys.argv = ['train.py', *{list(args)!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, 'train.py')!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**ENV, **(env or {})}, capture_output=True,
                          text=True, timeout=300, preexec_fn=stops_at_their_defaults())


def stop_in_the_third_step(*stops):
    """A hook for run_with_hook: the signals `stops`, one after the other, in the middle of the third step (iteration
    2 -> 3), between two evaluations."""
    return ("clip = torch.nn.utils.clip_grad_norm_\ncalls = []\n"
            "def clip_then_stop(*args, **kwargs):\n    calls.append(1)\n"
            f"    if len(calls) == 3:\n        for stop in {list(stops)!r}:\n"
            "            os.kill(os.getpid(), getattr(signal, stop))\n"
            "    return clip(*args, **kwargs)\n"
            "torch.nn.utils.clip_grad_norm_ = clip_then_stop")


# Ctrl-C; Kubernetes and Slurm; a hang-up; a study or torchrun stopped by Ctrl-C, which send their runs SIGTERM too
@pytest.mark.parametrize("stops", [["SIGINT"], ["SIGTERM"], ["SIGHUP"], ["SIGINT", "SIGTERM"]], ids="+".join)
def test_a_stop_finishes_its_step_saves_it_and_the_resume_logs_the_unbroken_runs_losses(workdir, stops):
    out = f"out_stop_{'_'.join(stops)}"
    result = run_with_hook(stop_in_the_third_step(*stops), *TINY, f"--out_dir={out}", "--max_iters=6", cwd=workdir)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert f"{stops[0]}: finishing this step, then ending the run" in result.stdout
    assert result.stderr.strip() == (f"interrupted: the last checkpoint is {out}/ckpt.pt (iteration 3); "
                                     f"continue with `python train.py --out_dir={out} --init_from=resume`")
    assert torch.load(workdir / out / "ckpt.pt", weights_only=True)["iter_num"] == 3
    train(workdir, out, "--init_from=resume")
    assert losses(log(workdir, out)) == losses(log(workdir, "out_full"))


def test_a_second_ctrl_c_ends_the_run_at_once_keeping_the_last_checkpoint(workdir):
    result = run_with_hook(stop_in_the_third_step("SIGINT", "SIGINT"), *TINY, "--out_dir=out_twice", "--max_iters=6",
                           cwd=workdir)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    # the evaluation of iteration 2 saved the last checkpoint; the step in progress is not saved
    assert result.stderr.strip().startswith("interrupted: the last checkpoint is out_twice/ckpt.pt "
                                            "(iteration 2); continue with")
    assert torch.load(workdir / "out_twice" / "ckpt.pt", weights_only=True)["iter_num"] == 2


def test_resuming_a_finished_run_says_it_is_finished_and_how_to_train_it_further(workdir, tmp_path):
    out = copy_run(workdir, tmp_path)
    before = files(out)
    result = run("train.py", f"--out_dir={out.name}", "--init_from=resume", cwd=tmp_path)
    assert result.stdout.strip() == ("out holds a finished run: 6 of max_iters=6 iterations, evaluated; to go on, "
                                     "resume with a larger --max_iters, e.g. --max_iters=12")
    assert files(out) == before


@pytest.mark.parametrize("lost", ["all", "first"])
def test_a_resume_writes_back_the_log_records_its_checkpoint_carries(workdir, tmp_path, lost):
    out = copy_run(workdir, tmp_path)
    lines = (out / "log.jsonl").read_text().splitlines(keepends=True)
    if lost == "all":
        (out / "log.jsonl").unlink()
    else:
        (out / "log.jsonl").write_text("".join(lines[1:]))
    train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4, 6, 8]
    assert (out / "log.jsonl").read_text().startswith("".join(lines))
    assert os.path.exists(out / "log.jsonl.aside1") == (lost == "first")


@pytest.mark.skipif(os.cpu_count() < 2, reason="one core: a single thread is all torch takes anyway")
def test_on_a_busy_cpu_a_run_takes_one_thread_a_core_that_is_free_and_logs_the_same_losses(workdir):
    hook = "os.getloadavg = lambda: (8.0, 8.0, 8.0)  # a CPU kept busy by other programs"
    env = {k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}
    args = [*TINY, "--out_dir=out_busy", "--max_iters=6"]
    code = (f"import os, runpy, sys\n{hook}\nsys.argv = ['train.py', *{args!r}]\n"
            f"runpy.run_path({os.path.join(ROOT, 'train.py')!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "note: using 1 of " in result.stdout and "the CPU is busy (load 8.0)" in result.stdout
    assert losses(log(workdir, "out_busy")) == losses(log(workdir, "out_full"))


def ddp_run_with_a_rank_killed(workdir, tmp_path, rank):
    """Two DDP processes on data/tiny into tmp_path/out; process `rank` is killed (kill -9) in the middle of its third
    step, while the other waits for it in the gradient exchange."""
    (tmp_path / "wrapper.py").write_text(
        "import os, runpy, signal, sys, torch\n"
        f"if os.environ['RANK'] == '{rank}':\n"
        "    clip = torch.nn.utils.clip_grad_norm_\n    calls = []\n"
        "    def clip_then_die(*args, **kwargs):\n        calls.append(1)\n"
        "        if len(calls) == 3:\n            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return clip(*args, **kwargs)\n"
        "    torch.nn.utils.clip_grad_norm_ = clip_then_die\n"
        f"runpy.run_path({os.path.join(ROOT, 'train.py')!r}, run_name='__main__')\n")
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(tmp_path / "wrapper.py"), *TINY, "--out_dir=out", "--max_iters=100"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_ddp_with_a_process_killed_ends_with_one_line_saying_where_the_checkpoint_is(workdir, tmp_path):
    # rank 1 is killed (kill -9) in the middle of its third step; rank 0 waits for it in the gradient exchange
    result = ddp_run_with_a_rank_killed(workdir, tmp_path, rank=1)
    assert result.returncode != 0
    lines = [re.sub(r"^\[rank\d\]: ", "", line) for line in result.stderr.splitlines()]  # torchrun's prefix
    lines = [line for line in lines if line.startswith(("error", "interrupted"))]
    assert len(lines) == 1 and lines[0].startswith("error: another process of this run ended"), result.stderr
    assert "the last checkpoint is out/ckpt.pt (iteration 2)" in lines[0], result.stderr
    assert 'train.py", line' not in result.stderr, result.stderr
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["iter_num"] == 2

# -----------------------------------------------------------------------------
# a resume leaves the log its checkpoint carries, restores what it can, and says what changed


def test_a_resume_sets_aside_a_log_with_records_its_checkpoint_does_not_carry_whole(workdir, tmp_path):
    """A record of another run at iteration 5 and a record written twice: after the resume the log holds exactly the
    checkpoint's records and the new ones; the log as it was is kept beside it, said in one line."""
    out = copy_run(workdir, tmp_path)  # its checkpoint is at iteration 6
    lines = (out / "log.jsonl").read_text().splitlines(keepends=True)
    foreign = json.dumps({"iter": 5, "train_loss": 99.0, "val_loss": 99.0}) + "\n"
    (out / "log.jsonl").write_text("".join(lines[:2]) + foreign + lines[1] + "".join(lines[2:]))
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8")
    assert f"out{os.sep}log.jsonl: set aside whole as out{os.sep}log.jsonl.aside1" in result.stdout
    assert (out / "log.jsonl.aside1").read_text() == "".join(lines[:2]) + foreign + lines[1] + "".join(lines[2:])
    assert (out / "log.jsonl").read_text().startswith("".join(lines))
    assert [r["iter"] for r in log(tmp_path, "out")] == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("missing", [["optimizer"], ["scaler"], ["optimizer", "scaler"]], ids="+".join)
def test_a_checkpoint_without_the_optimizer_or_scaler_state_is_refused_naming_what_it_lacks(workdir, tmp_path,
                                                                                           missing):
    """Every checkpoint train.py writes has them; one without is not train.py's, or an older version's."""
    out = copy_run(workdir, tmp_path)
    checkpoint = torch.load(out / "ckpt.pt", weights_only=True)
    for key in missing:
        del checkpoint[key]
    torch.save(checkpoint, out / "ckpt.pt")
    result = train(tmp_path, "out", "--init_from=resume", "--max_iters=8", check=False)
    assert_one_line_error(result, f"has no {', '.join(missing)} of the kind this code reads")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_during_an_evaluation_finishes_it_logs_it_and_saves_that_step(workdir, stop):
    """The stop comes at the first batch of the evaluation of iteration 2: the evaluation ends as it would have, is
    logged, the checkpoint is of iteration 2, and the resume logs the unbroken run's losses."""
    out = f"out_eval_stop_{stop}"
    hook = ("import data\nget = data.Batches.eval\nevaluations = []\n"
            "def eval_then_stop(self, split, k):\n"
            "    if split == 'train' and k == 0:\n        evaluations.append(1)\n"
            "        if len(evaluations) == 2:\n"
            f"            os.kill(os.getpid(), signal.{stop})\n"
            "    return get(self, split, k)\n"
            "data.Batches.eval = eval_then_stop")
    result = run_with_hook(hook, *TINY, f"--out_dir={out}", "--max_iters=6", cwd=workdir)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert f"{stop}: finishing this step" in result.stdout
    assert result.stderr.strip() == (f"interrupted: the last checkpoint is {out}/ckpt.pt (iteration 2); "
                                     f"continue with `python train.py --out_dir={out} --init_from=resume`")
    assert torch.load(workdir / out / "ckpt.pt", weights_only=True)["iter_num"] == 2
    assert losses(log(workdir, out)) == losses(log(workdir, "out_full"))[:2]  # iterations 0 and 2
    train(workdir, out, "--init_from=resume")
    assert losses(log(workdir, out)) == losses(log(workdir, "out_full"))


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_ddp_with_rank_0_killed_the_other_rank_names_the_checkpoint_on_disk(workdir, tmp_path):
    result = ddp_run_with_a_rank_killed(workdir, tmp_path, rank=0)
    assert result.returncode != 0
    lines = [re.sub(r"^\[rank\d\]: ", "", line) for line in result.stderr.splitlines()]
    lines = [line for line in lines if line.startswith(("error", "interrupted"))]
    assert len(lines) == 1 and "no checkpoint was saved yet" not in lines[0], result.stderr
    assert "the last checkpoint is out/ckpt.pt (iteration 2)" in lines[0], result.stderr
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["iter_num"] == 2

# -----------------------------------------------------------------------------
# the command of the model's card, in a fresh clone


def test_the_cards_command_without_its_data_says_what_the_run_is_and_how_to_prepare_it_before_writing_anything(
        tmp_path):
    result = run("train.py", "--variant=encdec", "--embedding_loss=mse", cwd=tmp_path, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    message = result.stderr
    assert message.startswith("error: data/wikitext103 is not prepared. This run trains the write-up's encdec model")
    assert re.search(r"\([\d.]+M parameters\)\n  on 1\.44B tokens, 9,000 steps over WikiText-103's 38M: about "
                     r"[\d.]+ (h|days) on this machine \(cpu, timed on one step\)", message), message
    assert "python prepare_wikipedia.py\n" in message
    assert "python train.py config/cpu_encdec_mse_pos_sub.py" in message
    assert "python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte" in message
    assert os.listdir(tmp_path) == []  # nothing downloaded or written
