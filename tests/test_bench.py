"""Specifications of lab/bench.py: it runs end to end in its quick mode and reports every variant (its figures are
checked by reading them, not here), and its decoding race against Hugging Face's GPT-2.

    python -m pytest -q tests/test_bench.py
"""
import json
import os

import pytest

from conftest import ROOT, config_path, run


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


def test_compiled_decoding_row_gives_the_eager_tokens_and_its_compile_cost(tmp_path, monkeypatch):
    import argparse
    from lab import bench
    config = tmp_path / "tiny.py"
    config.write_text('variant = "baseline"\nn_embed = 16\nn_head = 2\nn_layer = 1\nvocab_size = 64\n'
                      'context_size = 16\n')
    monkeypatch.setitem(bench.CONFIGS, "tiny", [str(config)])
    args = argparse.Namespace(configs="tiny", compile=True, decode_prompt=4, decode_tokens=6, decode_repeats=1)
    rows = {(r["model"], r["batch"]): r for r in bench.decode_race(args)["rows"]}
    for batch in (1, 8):  # batch 1: the newest token's strides must not change from step to step (no recompile)
        compiled = rows["ours baseline compiled", batch]
        assert compiled["same_tokens_as_eager"] and compiled["tokens_per_s"] > 0 and compiled["vs_eager"] > 0
        assert compiled["compile_s"] > 0  # its warm-up, less the eager one's
        assert compiled["pays_off_after"] is None or compiled["pays_off_after"] > 0
