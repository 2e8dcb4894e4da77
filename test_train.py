"""Specifications of train.py, sample.py, reversal.py and config/. CPU only, no network.

    python -m pytest -q test_train.py

train.py and sample.py run as subprocesses on a tiny model and a small generated text, prepared into a
temporary folder with prepare_wikipedia.py (--tokenizer byte).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import reversal
from model import ModelConfig, build_model

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": HERE}
TINY = ["--dataset=tiny", "--variant=encdec", "--n_layer=1", "--n_embed=32", "--n_head=2", "--context_size=32",
        "--batch_size=4", "--gradient_accumulation_steps=2", "--eval_interval=2", "--eval_iters=2", "--log_interval=1",
        "--warmup_iters=2", "--lr_decay_iters=8", "--learning_rate=3e-3", "--device=cpu"]


def run(script, *args, cwd, check=True):
    result = subprocess.run([sys.executable, os.path.join(HERE, script), *args], cwd=cwd, env=ENV,
                            capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def train(cwd, out_dir, *args, check=True):
    return run("train.py", *TINY, f"--out_dir={out_dir}", *args, cwd=cwd, check=check)


def log(cwd, out_dir):
    with open(os.path.join(cwd, out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def losses(records):
    keys = ("iter", "train_loss", "val_loss", "train_embedding_loss", "val_embedding_loss", "grad_norm")
    return [tuple(r[k] for k in keys) for r in records]


def assert_one_line_error(result, *fragments):
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder with data/tiny (prepared by prepare_wikipedia.py) and one finished 6-iteration run in out_full."""
    root = tmp_path_factory.mktemp("train")
    rng = np.random.default_rng(0)
    words = ["the", "river", "castle", "was", "built", "in", "a", "year", "by", "king", "of", "north", "and", "its", "walls"]
    articles = [f" = Article {i} = \n\n " + " ".join(rng.choice(words, size=150)) + " .\n" for i in range(20)]
    (root / "text.txt").write_text("".join(articles))
    run("prepare_wikipedia.py", "--input", "text.txt", "--name", "tiny", "--tokenizer", "byte", "--val_fraction", "0.1", cwd=root)
    train(root, "out_full", "--max_iters=6")
    return root


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


def test_log_records_every_eval_with_its_fields(workdir):
    records = log(workdir, "out_full")
    assert [r["iter"] for r in records] == [0, 2, 4, 6]
    tokens_per_iter = 2 * 4 * 32
    for r in records:
        assert r["tokens"] == r["iter"] * tokens_per_iter
        assert set(r) >= {"train_loss", "val_loss", "train_embedding_loss", "val_embedding_loss", "lr", "grad_norm", "tokens_per_sec", "mfu"}
        assert r["val_embedding_loss"] > 0  # the encdec default has the MSE embedding loss
    assert records[0]["tokens_per_sec"] is None and records[-1]["tokens_per_sec"] > 0 and 0 < records[-1]["mfu"]


def test_checkpoint_holds_what_a_resume_needs(workdir):
    checkpoint = torch.load(workdir / "out_full" / "ckpt.pt")
    assert checkpoint["iter_num"] == 6
    assert checkpoint["model_config"]["n_layer"] == 1 and checkpoint["model_config"]["embedding_loss"] == "mse"
    assert checkpoint["train_config"]["batch_size"] == 4 and checkpoint["train_config"]["dataset"] == "tiny"
    assert {"model", "optimizer", "best_val_loss", "rng"} <= set(checkpoint)
    assert not glob.glob(str(workdir / "out_full" / "*.tmp"))  # written to a temporary file, then renamed


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with the gloo backend is not available in this torch build")
def test_two_process_ddp_logs_the_losses_of_one_process_with_the_same_global_batch(workdir):
    # dropout too: its masks, like the batches, depend only on (seed, iteration, micro-step)
    args = [*TINY, "--max_iters=4", "--gradient_accumulation_steps=4", "--dropout=0.1"]
    run("train.py", *args, "--out_dir=out_single", cwd=workdir)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             os.path.join(HERE, "train.py"), *args, "--out_dir=out_ddp"],
                            cwd=workdir, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    single, ddp = losses(log(workdir, "out_single")), losses(log(workdir, "out_ddp"))
    assert [r[0] for r in ddp] == [0, 2, 4]
    np.testing.assert_allclose(np.array(ddp, dtype=float), np.array(single, dtype=float), rtol=1e-5, atol=1e-6)


def test_sample_continues_the_prompt(workdir):
    result = run("sample.py", "--out_dir=out_full", "--start=the castle", "--num_samples=2", "--max_new_tokens=20",
                 "--device=cpu", cwd=workdir)
    samples = [s for s in result.stdout.split("-" * 40 + "\n") if s.strip()]
    assert len(samples) == 2 and all(s.startswith("the castle") and len(s) > len("the castle") + 5 for s in samples)


def test_sample_reads_a_prompt_file_longer_than_the_context(workdir):
    (workdir / "prompt.txt").write_text("the river " * 10)  # 100 tokens, context_size 32
    result = run("sample.py", "--out_dir=out_full", "--start=FILE:prompt.txt", "--num_samples=1", "--max_new_tokens=5",
                 "--device=cpu", cwd=workdir)
    assert result.stdout.startswith("the river " * 10)


def test_sample_without_checkpoint_or_meta_says_what_to_do(workdir, tmp_path):
    assert_one_line_error(run("sample.py", "--out_dir=nowhere", cwd=workdir, check=False), "nowhere", "train")
    shutil.copytree(workdir / "out_full", tmp_path / "out_full")  # a folder without data/tiny/meta.json
    assert_one_line_error(run("sample.py", "--out_dir=out_full", cwd=tmp_path, check=False), "meta.json")


def test_unknown_key_suggests_the_closest_one(workdir):
    assert_one_line_error(train(workdir, "out_err", "--n_layr=2", check=False), "n_layr", "did you mean 'n_layer'")


def test_config_file_is_applied_and_checked(workdir):
    (workdir / "good.py").write_text("max_iters = 2\neval_interval = 1\nn_embed = 16\n")
    train(workdir, "out_config", str(workdir / "good.py"))
    assert [r["iter"] for r in log(workdir, "out_config")] == [0, 1, 2]
    assert torch.load(workdir / "out_config" / "ckpt.pt")["model_config"]["n_embed"] == 16
    (workdir / "bad.py").write_text("learning_rat = 1e-3\n")
    assert_one_line_error(train(workdir, "out_err", str(workdir / "bad.py"), check=False), "learning_rat", "bad.py", "'learning_rate'")


def test_value_of_the_wrong_type_is_refused(workdir):
    assert_one_line_error(train(workdir, "out_err", "--batch_size=many", check=False), "batch_size", "int")
    assert_one_line_error(train(workdir, "out_err", "--encoder_out_ln=3", check=False), "encoder_out_ln", "bool")


def test_invalid_model_flag_is_one_line_error(workdir):
    assert_one_line_error(train(workdir, "out_err", "--embedding_loss=l1", check=False), "embedding_loss", "mse")


def test_missing_dataset_says_how_to_prepare_it(workdir):
    assert_one_line_error(train(workdir, "out_err", "--dataset=nope", check=False), "data/nope", "prepare_wikipedia.py", "reversal")


def test_missing_dataset_hint_prepares_the_tokens_the_config_needs(workdir):
    result = run("train.py", os.path.join(HERE, "config", "cpu_baseline.py"), "--dataset=nope", cwd=workdir, check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --input PATH --name=nope --tokenizer=byte`")  # vocab_size=256
    result = run("train.py", "--dataset=nope", cwd=workdir, check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --input PATH --name=nope`")  # GPT-2 tokens, the default
    result = run("train.py", "--dataset=wikitext2_valid_byte", "--vocab_size=256", cwd=workdir, check=False)
    assert_one_line_error(result, "python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte")


def test_gpt2_tokens_for_a_byte_config_say_how_to_prepare_bytes(workdir, tmp_path):
    os.makedirs(tmp_path / "data")
    shutil.copytree(workdir / "data" / "tiny", tmp_path / "data" / "tiny")
    meta = json.loads((tmp_path / "data" / "tiny" / "meta.json").read_text())
    (tmp_path / "data" / "tiny" / "meta.json").write_text(json.dumps({**meta, "tokenizer": "gpt2", "vocab_size": 50257}))
    result = train(tmp_path, "out", "--vocab_size=256", check=False)
    assert_one_line_error(result, "vocab_size=256", "50257", "--tokenizer=byte")


def test_help_lists_every_setting_with_its_default_and_meaning(tmp_path):
    result = run("train.py", "--help", cwd=tmp_path)
    lines = {line.split("=")[0].strip(): line for line in result.stdout.splitlines() if line.startswith("  --")}
    training = ["out_dir", "dataset", "batch_size", "gradient_accumulation_steps", "max_iters", "learning_rate", "decay_lr",
                "min_lr", "warmup_iters", "lr_decay_iters", "weight_decay", "beta1", "beta2", "grad_clip", "eval_interval",
                "eval_iters", "log_interval", "init_from", "overwrite", "always_save_checkpoint", "seed", "device", "dtype", "compile"]
    assert set(lines) == {f"--{key}" for key in training + ModelConfig.flags()}
    assert "--batch_size=50 " in lines["--batch_size"] and "sequences per micro-batch" in lines["--batch_size"]
    assert "--n_layer=13 " in lines["--n_layer"] and "--embedding_loss=None " in lines["--embedding_loss"]
    for key in training:  # each with a meaning after its default
        assert len(lines[f"--{key}"].split(maxsplit=1)) == 2, lines[f"--{key}"]
    assert not os.listdir(tmp_path)  # nothing trained, nothing written


def test_each_dataset_has_its_own_default_out_dir(workdir):
    run("train.py", *TINY, "--max_iters=0", cwd=workdir)
    assert os.path.exists(workdir / "out-tiny" / "ckpt.pt")


def test_corrupt_checkpoint_is_refused(workdir):
    shutil.copytree(workdir / "out_full", workdir / "out_corrupt")
    path = workdir / "out_corrupt" / "ckpt.pt"
    path.write_bytes(path.read_bytes()[:5000])
    assert_one_line_error(train(workdir, "out_corrupt", "--init_from=resume", "--max_iters=8", check=False), "unreadable")


def test_missing_or_mismatched_checkpoint_is_refused(workdir):
    assert_one_line_error(train(workdir, "out_none", "--init_from=resume", check=False), "no checkpoint")
    result = train(workdir, "out_full", "--init_from=resume", "--max_iters=8", "--n_layer=2", check=False)
    assert_one_line_error(result, "n_layer=1", "n_layer=2")
    result = train(workdir, "out_full", "--init_from=resume", "--max_iters=8", "--dataset=reversal", check=False)
    assert_one_line_error(result, "tiny", "reversal")


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(workdir):
    shutil.copytree(workdir / "out_full", workdir / "out_nan")
    path = workdir / "out_nan" / "ckpt.pt"
    before = path.read_bytes()
    result = train(workdir, "out_nan", "--init_from=resume", "--max_iters=10", "--learning_rate=1e30", check=False)
    assert_one_line_error(result, "non-finite")
    assert path.read_bytes() == before
    assert [r["iter"] for r in log(workdir, "out_nan")] == [0, 2, 4, 6]


def test_reversal_demo_learns_above_chance(tmp_path):
    result = run("train.py", "--dataset=reversal", "--n_layer=2", "--n_embed=64", "--n_head=4", "--max_iters=100",
                 "--eval_interval=50", "--device=cpu", cwd=tmp_path)
    assert "reversal: using its schedule for" in result.stdout and "max_iters" not in result.stdout.splitlines()[0]
    records = log(tmp_path, "out-reversal")  # its own default folder
    assert records[0]["val_accuracy"] == 0.0
    assert records[-1]["val_accuracy"] > 0.05  # chance: about 1 in 9 ** length, at most 1 in 81 on held-out sequences
    # sample.py finds the one out-*/ run; greedy decoding of one prompt has one answer, printed once
    result = run("sample.py", "--start=3 5 4", "--num_samples=3", "--device=cpu", cwd=tmp_path)
    assert result.stdout.startswith("3 5 4 -> ") and len(result.stdout.split("->")[1].split()) == 3
    assert len(result.stdout.splitlines()) == 1
    # without --start: a different random digit sequence per sample
    lines = run("sample.py", "--num_samples=4", "--device=cpu", cwd=tmp_path).stdout.splitlines()
    prompts = [line.split(" -> ")[0] for line in lines]
    assert len(lines) == 4 and len(set(prompts)) == 4
    assert all(len(line.split(" -> ")[1].split()) == len(prompt.split()) for line, prompt in zip(lines, prompts))


def test_reversal_targets_are_the_reversed_digits_only():
    inputs, targets = reversal.encode([np.array([3, 5, 4])])
    assert inputs[0].tolist() == [10, 3, 5, 4, 11, 4, 5, 3, 0, 0, 0]
    assert targets[0].tolist() == [-1, -1, -1, -1, 4, 5, 3, -1, -1, -1, -1]


def test_reversal_held_out_sequences_never_appear_in_training():
    train_sequences, held_out = reversal.split()
    for n in range(1, reversal.MAX_LEN + 1):
        seen = {tuple(x) for x in train_sequences[n]}
        assert not seen & {tuple(x) for x in held_out[n]}
        assert len(seen) + len(held_out[n]) == 9 ** n
    assert sum(len(x) for x in held_out.values()) > 400


def load_config(path):
    """The model flags a config file sets, as train.py reads them."""
    namespace = {}
    exec(open(path).read(), namespace)
    return {k: v for k, v in namespace.items() if k in ModelConfig.flags()}


@pytest.mark.parametrize("name, params", [
    ("paper_baseline", 16_036_800), ("paper_smaller_baseline", 15_441_192), ("paper_dropout_baseline", 16_036_800),
    ("paper_encdec_mse_pos_sub", 15_763_500), ("paper_parallel", 15_698_400), ("paper_parallel_baseline", 15_850_380)])
def test_paper_configs_have_the_write_ups_parameter_counts(name, params):
    config = ModelConfig(vocab_size=50257, **load_config(os.path.join(HERE, "config", f"{name}.py")))
    assert build_model(config).num_params() == params


def test_cpu_encoder_decoders_have_at_most_the_baselines_parameters():
    def params(name):
        return build_model(ModelConfig(**load_config(os.path.join(HERE, "config", f"cpu_{name}.py")))).num_params()  # byte vocab
    baseline = params("baseline")
    others = [os.path.basename(p)[4:-3] for p in glob.glob(os.path.join(HERE, "config", "cpu_*.py"))
              if not os.path.basename(p).startswith("cpu_gpt2_")]  # the GPT-2-token suite: test_study.py
    assert {"encdec_none", "encdec_mse_pos_sub", "parallel", "smaller_baseline"} <= set(others)
    for name in others:
        if name not in ("base", "baseline", "dropout_baseline"):
            assert params(name) <= baseline, name
