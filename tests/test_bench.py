"""Specifications of lab/bench.py: it runs end to end in its quick mode and reports every variant (its figures are
checked by reading them, not here), and its decoding race against Hugging Face's GPT-2.

    python -m pytest -q tests/test_bench.py
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import (ENV, ROOT, assert_interrupted, assert_one_line_error, config_path, run,
                      stops_at_their_defaults)


def test_quick_bench_reports_every_variant_with_identical_cached_sampling(tmp_path):
    out = tmp_path / "bench.json"
    result = run("lab/bench.py", "--quick", "--configs=cpu", "--repeats=1", "--batch_size=2", "--decode_tokens=4",
                 "--decode_repeats=1", f"--json={out}", cwd=ROOT, timeout=600)
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["baseline", "encdec", "parallel"]
    for r in rows:
        assert r["sample200_identical"], f"{r['variant']}: cached and uncached greedy samples differ"
        assert r["train_tokens_per_s"] > 0 and 0 < r["mfu"] and r["peak_mem_mib"] > 0
    assert "training tokens/s relative to the baseline" in result.stdout


def run_decode_race(tmp_path, env=None):
    out = tmp_path / "decode.json"
    result = run("lab/bench.py", "--decode_only", "--configs=cpu", "--decode_prompt=6", "--decode_tokens=6",
                 "--decode_repeats=1", "--threads=1", f"--json={out}", cwd=ROOT, env=env)
    return result.stdout, json.loads(out.read_text())["decode"]


def test_hf_gpt2_holding_the_baseline_weights_gives_the_baseline_logits():
    pytest.importorskip("transformers")
    import torch
    from lab import bench
    torch.manual_seed(0)
    model = bench.build_model(bench.model_config(config_path("cpu_baseline"))).eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(bench.hf_gpt2(model)(idx).logits[:, -1:], model(idx)[0], rtol=1e-4, atol=1e-4)


def test_decode_race_reports_tokens_per_s_against_hf_with_the_same_tokens(tmp_path):
    pytest.importorskip("transformers")
    stdout, decode = run_decode_race(tmp_path)
    rows = {(r["model"], r["batch"]): r for r in decode["rows"]}
    assert set(rows) == {(m, b) for m in ("ours baseline", "ours encdec", "ours parallel", "HF GPT2LMHeadModel")
                         for b in (1, 8)}
    assert all(r["tokens_per_s"] > 0 and 0 < r["of_bound"] and r["vs_hf"] > 0 for r in rows.values())
    assert rows["HF GPT2LMHeadModel", 1]["tokens_agree_with_hf"] and rows["ours baseline", 8]["tokens_agree_with_hf"]
    assert decode["memory_bandwidth"] > 0 and "same as HF" in stdout


def test_decode_race_without_transformers_skips_the_hf_row_saying_how_to_install_it(tmp_path):
    hidden = tmp_path / "hide" / "transformers"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    stdout, decode = run_decode_race(tmp_path, {"PYTHONPATH": str(hidden.parent)})
    assert "pip install transformers" in stdout
    assert {r["model"] for r in decode["rows"]} == {"ours baseline", "ours encdec", "ours parallel"}
    assert all(r["vs_hf"] is None and r["tokens_per_s"] > 0 for r in decode["rows"])


def tiny_configs(tmp_path, monkeypatch):
    """bench.CONFIGS["tiny"]: the three variants at a few thousand parameters."""
    from lab import bench
    paths = []
    for variant in ("baseline", "encdec", "parallel"):
        paths.append(tmp_path / f"tiny_{variant}.py")
        paths[-1].write_text(f'variant = "{variant}"\nn_embed = 16\nn_head = 2\nn_layer = 1\nvocab_size = 64\n'
                             'context_size = 16\n')
    monkeypatch.setitem(bench.CONFIGS, "tiny", [str(p) for p in paths])


def test_training_race_reports_every_model_against_hf_and_the_optimizer_step_with_its_parts(tmp_path, monkeypatch,
                                                                                            capsys):
    pytest.importorskip("transformers")
    import argparse
    from lab import bench
    tiny_configs(tmp_path, monkeypatch)
    args = argparse.Namespace(device="cpu", dtype="float32", configs="tiny", batch_size=2, step_sequences=4,
                              repeats=1, quick=True, compile=False)
    race = bench.train_race(args)
    rows = {r["model"]: r for r in race["rows"]}
    assert set(rows) == {"ours baseline", "ours encdec", "ours parallel", "HF GPT2LMHeadModel"}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["vs_hf"] > 0 and 0 < r["mfu"] and r["micro_batch"] == 2
        assert set(r["parts"]) == {"forward", "backward", "optimizer"} and min(r["parts"].values()) > 0
    assert rows["HF GPT2LMHeadModel"]["vs_hf"] == 1 and rows["ours baseline"]["vs_baseline"] == 1
    assert [(r["model"], r["micro_batch"], r["accumulation"]) for r in race["step_rows"]] == [
        ("ours baseline", 4, 1), ("ours encdec", 4, 1), ("ours parallel", 4, 1)]  # 4 sequences fit at once
    assert [(t["model"], t["figure"], t["target"]) for t in race["targets"]] == [
        ("ours baseline", "vs_hf", 1.2), ("ours encdec", "vs_baseline", 0.9), ("ours baseline", "mfu", 0.25),
        ("ours encdec", "mfu", 0.25), ("ours parallel", "mfu", 0.25)]
    stdout = capsys.readouterr().out
    for t in race["targets"]:  # a figure short of its target says what part of the step bounds it
        assert t["met"] == (t["value"] >= t["target"])
    assert stdout.count("target: ") == 5 and stdout.count("SHORT; its step is bound by its ") == sum(
        not t["met"] for t in race["targets"])


def test_optimizer_step_takes_the_largest_micro_batch_that_fits_and_accumulates_the_rest(tmp_path, monkeypatch):
    import torch
    from lab import bench
    tiny_configs(tmp_path, monkeypatch)
    config, real, tried = bench.model_config(bench.CONFIGS["tiny"][0]), bench.Trainer, []

    def trainer(config, micro, *args, **kwargs):  # a device that holds 2 sequences at once
        tried.append(micro)
        if micro > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(config, micro, *args, **kwargs)
    monkeypatch.setattr(bench, "Trainer", trainer)
    fitted, micro, _ = bench.largest_fitting(config, 8, "cpu", torch.float32, False)
    assert tried == [8, 4, 2] and micro == 2 and fitted.accumulation == 4 and fitted.x.shape == (2, 16)
    monkeypatch.setattr(bench, "Trainer", lambda *a, **k: (_ for _ in ()).throw(ValueError("not memory")))
    with pytest.raises(ValueError):  # any other error is not swallowed
        bench.largest_fitting(config, 8, "cpu", torch.float32, False)


def test_decode_race_runs_in_the_precision_asked_for(tmp_path, monkeypatch):
    import argparse
    from lab import bench
    tiny_configs(tmp_path, monkeypatch)
    bytes_of = {}
    for dtype in ("float32", "bfloat16"):
        args = argparse.Namespace(configs="tiny", compile=False, decode_prompt=4, decode_tokens=3, decode_repeats=1,
                                  device="cpu", dtype=dtype)
        decode = bench.decode_race(args)
        assert decode["dtype"] == dtype and decode["device"] == "cpu"
        bytes_of[dtype] = {(r["model"], r["batch"]): r["weight_bytes"] for r in decode["rows"]}
    assert all(bytes_of["bfloat16"][k] * 2 == b for k, b in bytes_of["float32"].items())


def test_decode_race_on_a_device_that_is_missing_is_one_line():
    result = run("lab/bench.py", "--decode_only", "--device=cuda", cwd=ROOT, env={"CUDA_VISIBLE_DEVICES": ""},
                 check=False)
    assert_one_line_error(result, "device='cuda' is not available here", "--device=cpu")


def test_training_race_races_a_model_whose_compile_fails_eager_saying_so_in_one_line(tmp_path, monkeypatch, capsys):
    import argparse
    import torch
    from lab import bench
    tiny_configs(tmp_path, monkeypatch)

    class BackendCompilerFailed(Exception):  # what torch.compile raises when the compiler fails
        __module__ = "torch._dynamo.exc"  # where torch's lives

    def compile(model):
        if getattr(getattr(model, "config", None), "variant", None) != "encdec":
            return model
        return lambda *args, **kwargs: (_ for _ in ()).throw(BackendCompilerFailed("TypeError: list indices"))
    monkeypatch.setattr(torch, "compile", compile)
    args = argparse.Namespace(device="cpu", dtype="float32", configs="tiny", batch_size=2, step_sequences=2,
                              repeats=1, quick=True, compile=True)
    rows = {r["model"]: r for r in bench.train_race(args)["rows"]}
    assert not rows["ours encdec"]["compiled"] and rows["ours encdec"]["tokens_per_s"] > 0
    assert rows["ours baseline"]["compiled"]
    lines = [line for line in capsys.readouterr().out.splitlines() if "raced eager instead" in line]
    assert lines == ["train race: ours encdec: torch.compile could not build the model (BackendCompilerFailed: "
                     "TypeError: list indices); use --compile=False; raced eager instead"]


@pytest.mark.parametrize("args, fragments", [
    (["--configs=bogus"], ["--configs=bogus is not allowed", "use paper, cpu or both"]),
    (["--configs=cpu,bogus"], ["--configs=cpu,bogus is not allowed"]),
    (["--repeats=-1"], ["--repeats=-1 is not allowed; use 1 or more timed steps"]),
    (["--repeats=0"], ["--repeats=0 is not allowed"]),
    (["--threads=-2"], ["--threads=-2 is not allowed; use 1 or more threads"]),
    (["--sample_batch_size=0"], ["--sample_batch_size=0 is not allowed; use 1 or more sequences"]),
    (["--decode_prompt=128"], ["--decode_prompt=128 is not allowed; use 1 to 127 tokens", "context of 128"]),
    (["--train_only", "--decode_only"], ["--train_only and --decode_only: give one of them"]),
    (["--json={tmp}/missing/x.json"], ["--json={tmp}/missing/x.json is not allowed",
                                       "its folder {tmp}/missing does not exist"]),
    (["--json={tmp}"], ["--json={tmp} is not allowed; it is a folder"])])
def test_every_flag_is_checked_before_the_first_measurement(tmp_path, monkeypatch, args, fragments):
    """A bad flag is one line naming it and the fix, before any work: nothing is measured."""
    from lab import bench
    for name in ("matmul_peak", "Trainer", "train_race", "decode_race", "memory_bandwidth"):
        monkeypatch.setattr(bench, name, lambda *a, **k: pytest.fail("measured before its flags were checked"))
    monkeypatch.setattr("sys.argv", ["lab/bench.py", "--device=cpu", "--configs=cpu",
                                     *(a.format(tmp=tmp_path) for a in args)])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert_one_line_error(str(e.value.code), *(f.format(tmp=tmp_path) for f in fragments))


def test_json_on_a_read_only_disk_is_refused_before_the_first_measurement(small_disk, monkeypatch):
    from lab import bench
    folder = small_disk("read_only", 100, read_only=True)
    monkeypatch.setattr(bench, "matmul_peak", lambda *a, **k: pytest.fail("measured before its flags were checked"))
    monkeypatch.setattr("sys.argv", ["lab/bench.py", "--device=cpu", f"--json={folder}/bench.json"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert_one_line_error(str(e.value.code), f"--json={folder}/bench.json is not allowed", "is not writable")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # Ctrl-C; docker, Kubernetes, a cluster's scheduler
def test_a_stop_during_the_benchmark_is_one_line(tmp_path, stop):
    fifo = tmp_path / "measuring"
    os.mkfifo(fifo)
    code = ("import runpy, signal, sys, machinery.hardware\n"  # the first measurement says it started, then goes on
            f"def measuring(*args, **kwargs):\n    open({str(fifo)!r}, 'w').write('measuring')\n    signal.pause()\n"
            "machinery.hardware.matmul_peak = measuring\n"
            "sys.argv = ['lab/bench.py', '--device=cpu', '--configs=cpu', '--quick']\n"
            f"runpy.run_path({os.path.join(ROOT, 'lab', 'bench.py')!r}, run_name='__main__')\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True,
                               preexec_fn=stops_at_their_defaults())
    try:
        with open(fifo) as f:
            assert f.read() == "measuring"
        process.send_signal(getattr(signal, stop))
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130
    assert_interrupted(subprocess.CompletedProcess([], 130, "", stderr), "the benchmark was stopped",
                       "no --json file was written")
