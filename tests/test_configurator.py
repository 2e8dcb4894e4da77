"""Specifications of configurator.py: config files, --key=value, --help, "did you mean", and of the one-line stops
(machinery/process.py's `fail`) and the device choice (machinery/hardware.py's `pick_device`), as train.py uses them.
CPU only, no network.

    python -m pytest -q tests/test_configurator.py
"""
import ast
import os
import shutil

import pytest
import torch

from configurator import read_config
from machinery.hardware import pick_device
from machinery.process import fail, machine_error
from conftest import ROOT, assert_one_line_error, config_files, config_path, log, run, train
from model import ModelConfig


def test_fail_stops_with_one_error_line():
    with pytest.raises(SystemExit) as exit:
        fail("the thing is broken; fix it")
    assert exit.value.code == "error: the thing is broken; fix it"  # a message as the code: exit status 1


def test_unknown_key_suggests_the_closest_one(workdir):
    assert_one_line_error(train(workdir, "out_err", "--n_layr=2", check=False), "n_layr", "did you mean 'n_layer'")


def test_config_file_is_applied_and_checked(workdir):
    (workdir / "good.py").write_text("max_iters = 2\neval_interval = 1\nn_embed = 16\n")
    train(workdir, "out_config", str(workdir / "good.py"))
    assert [r["iter"] for r in log(workdir, "out_config")] == [0, 1, 2]
    assert torch.load(workdir / "out_config" / "ckpt.pt", weights_only=True)["model_config"]["n_embed"] == 16
    (workdir / "bad.py").write_text("learning_rat = 1e-3\n")
    result = train(workdir, "out_err", str(workdir / "bad.py"), check=False)
    assert_one_line_error(result, "learning_rat", "bad.py", "'learning_rate'")


def own_settings(path):
    """The names a config file assigns itself, not through the file it imports."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    return {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets}


def base_of(path):
    """The config module a config file imports with `from config.X import *`, as a path; None if none."""
    bases = [node.module for node in ast.parse(open(path, encoding="utf-8").read()).body
             if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("config.", "lab.config."))]
    return os.path.join(ROOT, *bases[0].split(".")) + ".py" if bases else None


def test_read_config_of_a_config_that_imports_its_base_returns_the_inherited_settings(tmp_path):
    (tmp_path / "mine.py").write_text("from config.cpu_base import *\nmax_iters = 7\n")
    base, mine = read_config(config_path("cpu_base")), read_config(str(tmp_path / "mine.py"))
    assert base["dataset"] == "wikitext2_valid_byte" and base["max_iters"] != 7
    assert mine == {**base, "max_iters": 7}  # the settings only: no module, no underscore name
    # every config file that extends another: the other's settings, then its own
    children = [path for path in sorted(config_files()) if base_of(path)]
    assert len(children) > 20
    for path in children:
        settings, inherited, own = read_config(path), read_config(base_of(path)), own_settings(path)
        assert set(settings) == set(inherited) | own, path
        assert {k: v for k, v in settings.items() if k not in own} == {k: v for k, v in inherited.items()
                                                                        if k not in own}, path
    # two levels: cpu_encdec_mse.py extends cpu_encdec_none.py, which extends cpu_base.py
    assert base_of(config_path("cpu_encdec_mse")).endswith("cpu_encdec_none.py")
    settings = read_config(config_path("cpu_encdec_mse"))
    assert settings["dataset"] == base["dataset"] and settings["variant"] == "encdec"
    assert settings["embedding_loss"] == "mse"


def test_value_of_the_wrong_type_is_refused(workdir):
    assert_one_line_error(train(workdir, "out_err", "--batch_size=many", check=False), "batch_size", "int")
    assert_one_line_error(train(workdir, "out_err", "--encoder_out_ln=3", check=False), "encoder_out_ln",
                          "takes True or False")


@pytest.mark.parametrize("text, line", [(b"max_iters = 2\nn_layer = (\n", 2),
                                        (b"max_iters = 2\n\nn_layer = 1 / 0\n", 3),
                                        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", None)],
                         ids=["syntax_error", "raises", "binary"])
def test_broken_config_file_names_the_file_and_line(workdir, tmp_path, text, line):
    (tmp_path / "broken.py").write_bytes(text)
    result = train(workdir, "out_err", str(tmp_path / "broken.py"), check=False)
    assert_one_line_error(result, "broken.py", *([f"line {line}"] if line else []))
    assert "<string>" not in result.stderr


@pytest.mark.parametrize("code", [0, None, "bye"])
def test_a_config_file_that_calls_sys_exit_is_one_line_error_not_a_silent_exit(workdir, tmp_path, code):
    (tmp_path / "exits.py").write_text(f"import sys\nn_layer = 1\nsys.exit({code!r})\n")
    result = train(workdir, "out_exits", str(tmp_path / "exits.py"), check=False)
    assert_one_line_error(result, "exits.py line 3 raised SystemExit", "only assigns settings")
    assert not (workdir / "out_exits").exists()


def test_a_config_file_not_found_is_one_line_naming_an_example(tmp_path):
    shutil.copytree(os.path.join(ROOT, "config"), tmp_path / "config")
    result = run("train.py", "config/cpu_basline.py", cwd=tmp_path, check=False)
    assert_one_line_error(result, "config file 'config/cpu_basline.py' not found; give a path like")
    assert os.listdir(tmp_path) == ["config"]  # nothing trained, nothing written


def test_help_lists_every_setting_with_its_default_and_meaning(tmp_path):
    result = run("train.py", "--help", cwd=tmp_path)
    lines = {line.split("=")[0].strip(): line for line in result.stdout.splitlines() if line.startswith("  --")}
    training = ["out_dir", "dataset", "batch_size", "gradient_accumulation_steps", "max_iters", "learning_rate",
                "decay_lr", "min_lr", "warmup_iters", "lr_decay_iters", "weight_decay", "beta1", "beta2", "grad_clip",
                "eval_interval", "eval_iters", "log_interval", "init_from", "overwrite", "always_save_checkpoint",
                "seed", "device", "dtype", "compile", "wandb_log", "wandb_project", "wandb_run_name"]
    assert set(lines) == {f"--{key}" for key in training + ModelConfig.flags()}
    assert "--batch_size=50 " in lines["--batch_size"] and "sequences per micro-batch" in lines["--batch_size"]
    assert "--n_layer=13 " in lines["--n_layer"] and "--embedding_loss=None " in lines["--embedding_loss"]
    for key in training:  # each with a meaning after its default
        assert len(lines[f"--{key}"].split(maxsplit=1)) == 2, lines[f"--{key}"]
    assert not os.listdir(tmp_path)  # nothing trained, nothing written

# -----------------------------------------------------------------------------
# pick_device: the one place where every script's device and precision are chosen and checked


def fake_devices(monkeypatch, cuda=None, mps=False):
    """Pretend this torch sees one CUDA GPU of compute capability `cuda` (e.g. (7, 5), a T4), and / or MPS."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda is not None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda is not None))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)  # as torch says of a T4
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize("cuda, mps, expected", [
    ((8, 0), True, ("cuda", "bfloat16")),  # an A100: bf16 in hardware
    ((7, 5), True, ("cuda", "float16")),  # a T4 (Colab's free GPU): emulated bf16 is slow, so float16 and a scaler
    ((7, 0), False, ("cuda", "float16")),  # a V100
    (None, True, ("mps", "float32")),  # Apple silicon
    (None, False, ("cpu", "float32")),
], ids=["a100", "t4", "v100", "apple_silicon", "cpu"])
def test_auto_picks_cuda_then_mps_then_cpu_and_bfloat16_only_where_the_gpu_has_it(monkeypatch, cuda, mps, expected):
    fake_devices(monkeypatch, cuda, mps)
    assert pick_device("auto", "auto") == expected
    assert pick_device("cpu", "auto") == ("cpu", "float32")
    assert pick_device("cpu", "float16") == ("cpu", "float16")  # the GPU's code path, tested on the CPU


@pytest.mark.parametrize("device, dtype, cuda, mps, fragments", [
    ("gpu", "auto", None, False, ["device='gpu' is not allowed", "--device=cpu", "mps"]),
    ("cuda", "auto", None, True, ["device='cuda' is not available here", "(0 CUDA devices, MPS)", "--device=auto"]),
    ("cuda:1", "auto", (8, 0), False, ["device='cuda:1' is not available here", "(1 CUDA devices", "--device=cpu"]),
    ("mps", "auto", (8, 0), False, ["device='mps' is not available here", "no MPS", "--device=auto"]),
    ("mps", "float16", None, True, ["dtype='float16' on mps", "--dtype=float32"]),
    ("cpu", "fp16", None, False, ["dtype='fp16' is not allowed", "float16"]),
], ids=["malformed", "no_cuda", "no_second_gpu", "no_mps", "mps_float16", "malformed_dtype"])
def test_a_device_asked_for_but_not_present_is_one_line_error(monkeypatch, device, dtype, cuda, mps, fragments):
    fake_devices(monkeypatch, cuda, mps)
    with pytest.raises(SystemExit) as error:
        pick_device(device, dtype)
    assert_one_line_error(str(error.value.code), *fragments)


@pytest.mark.parametrize("detail, no_compiler", [
    ("TypeError: list indices must be integers or slices, not NoneType", False),  # torch 2.11's, on one GPU
    ("InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx", True)])
def test_an_error_of_any_class_from_the_compiler_is_one_line_naming_compile_false(detail, no_compiler):
    """Whatever the torch release calls it: an error raised from torch._dynamo or torch._inductor is a compile error."""
    error = type("InductorError", (RuntimeError,), {"__module__": "torch._inductor.exc"})(detail)
    line = machine_error(error, "--batch_size")
    assert line.startswith(f"torch.compile could not build the model (InductorError: {detail}); use --compile=False")
    assert ("install a C++ compiler" in line) == no_compiler
    assert machine_error(RuntimeError(detail), "--batch_size") is None  # the same words from elsewhere: not the machine
