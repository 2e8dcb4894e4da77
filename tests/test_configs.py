"""Specifications of the config/ files: their models have the write-ups' parameter counts, and an encoder-decoder
at most its baseline's. (The GPT-2-token suite's configs: test_study.py.)

    python -m pytest -q tests/test_configs.py
"""
import glob
import os
import re

import pytest

from configurator import read_config
from conftest import ROOT, config_files, config_path
from model import ModelConfig, build_model


def load_config(path):
    """The model flags a config file sets, as train.py reads them."""
    return {k: v for k, v in read_config(path).items() if k in ModelConfig.flags()}


@pytest.mark.parametrize("name, params", [
    ("paper_baseline", 16_036_800), ("paper_smaller_baseline", 15_441_192), ("paper_dropout_baseline", 16_036_800),
    ("paper_encdec_mse_pos_sub", 15_763_500), ("paper_parallel", 15_698_400), ("paper_parallel_baseline", 15_850_380)])
def test_paper_configs_have_the_write_ups_parameter_counts(name, params):
    config = ModelConfig(vocab_size=50257, **load_config(config_path(name)))
    assert build_model(config).num_params() == params


def test_cpu_encoder_decoders_have_at_most_the_baselines_parameters():
    def params(name):  # byte vocab
        return build_model(ModelConfig(**load_config(config_path(f"cpu_{name}")))).num_params()
    baseline = params("baseline")
    others = [os.path.basename(p)[4:-3] for p in config_files("cpu_*")
              if not os.path.basename(p).startswith("cpu_gpt2_")]  # the GPT-2-token suite: test_study.py
    assert {"encdec_none", "encdec_mse_pos_sub", "parallel", "smaller_baseline"} <= set(others)
    for name in others:
        if name not in ("base", "baseline", "dropout_baseline"):
            assert params(name) <= baseline, name


GPU_SMALL = sorted(p for p in glob.glob(os.path.join(ROOT, "config", "gpu_small_*.py")) if not p.endswith("_base.py"))


@pytest.mark.parametrize("path", GPU_SMALL, ids=os.path.basename)
def test_laptop_gpu_configs_state_their_flops_per_run_and_stay_under_one_pass(path):
    settings = read_config(path)
    model = build_model(ModelConfig(vocab_size=50257, **load_config(path)))  # WikiText-103's GPT-2 tokens
    tokens = (settings["max_iters"] * settings["batch_size"] * settings["gradient_accumulation_steps"]
              * settings["context_size"])
    stated = float(re.search(r"FLOPs per run: ([\d.e+]+)", open(path).read())[1])
    assert stated == pytest.approx(model.flops_per_token(settings["context_size"]) * tokens, rel=0.01)
    assert tokens < 38.3e6 and settings["device"] == "auto" and settings["dtype"] == "auto"
    baseline = build_model(ModelConfig(vocab_size=50257, **load_config(GPU_SMALL[0]))).num_params()
    assert GPU_SMALL[0].endswith("gpu_small_baseline.py") and model.num_params() <= baseline
