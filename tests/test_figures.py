"""The figures README.md and lab/results.md quote, computed again from the committed logs and the models: a sentence
that drifts from what its source gives fails here.

    python -m pytest -q tests/test_figures.py
"""
import functools
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT
from configurator import read_config
from lab import study
from model import ModelConfig, build_model


def text(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def notebook_prose(name="notebooks/02_loss_curves.ipynb"):
    """The markdown cells of a notebook (a JSON file), one text, as they read in the file."""
    cells = json.loads(text(name))["cells"]
    return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def section(name, title):
    """The part of a markdown file from the heading `title` to the next heading of its level."""
    t, hashes = text(name), title.split(" ")[0]
    start = t.index(title)
    end = t.find("\n" + hashes + " ", start + len(title))
    return t[start:] if end < 0 else t[start:end]


def summary():
    """lab/results.md's summary of what the experiments found, which the README's ten lines shorten."""
    return section("lab/results.md", "## In short: what the experiments found")


def signed(value, decimals=3):
    """A difference as the prose writes it: +0.060, −0.038 (a minus sign, not a hyphen)."""
    return ("+" if value >= 0 else "−") + f"{abs(value):.{decimals}f}"


def interval(ci, decimals=3):
    return f"[{signed(ci[0], decimals)}, {signed(ci[1], decimals)}]"


@functools.lru_cache(maxsize=None)
def logs_of(suite):
    """A suite's finished runs as --summary reads them (gpt2_next with its references from gpt2_heldout)."""
    s = study.SUITES[suite]
    seeds = s["seeds"] + s.get("extra_seeds", [])
    logs = study.load(os.path.join(ROOT, s["results"]), s["runs"], seeds, lambda run: study.suite_iters(suite, run))
    if s.get("reference"):
        reference = study.SUITES[s["reference"]]
        logs = {**study.load(os.path.join(ROOT, reference["results"]), ["baseline", "encdec_none"], seeds,
                             lambda run: study.suite_iters(s["reference"], run)), **logs}
    return logs


@functools.lru_cache(maxsize=None)
def claims(suite):
    return {(r["a"], r["b"], r["figure"]): r for r in study.with_holm(study.claim_rows(suite, logs_of(suite)))
            if r["n"] >= 2}


def model_from(settings):
    return build_model(ModelConfig(**{k: v for k, v in settings.items() if k in ModelConfig.flags()}))


# -----------------------------------------------------------------------------
# parameter counts


def test_the_write_ups_parameters_go_where_reproduce_md_says():
    """docs/reproduce.md's table: each layer, the layers, the tied embedding and the totals of config/paper_*.py's
    baseline and best encoder-decoder, the formulas per layer, and the position tables the counts leave out; the
    README's idea gives the two totals."""
    idea = section("docs/reproduce.md", "## Where the parameters go")
    baseline = model_from(read_config(os.path.join(ROOT, "config/paper_baseline.py")))
    encdec = model_from(read_config(os.path.join(ROOT, "config/paper_encdec_mse_pos_sub.py")))
    count = lambda module: sum(p.numel() for p in module.parameters())
    layer, encoder_layer, decoder_layer = (count(baseline.blocks[0]), count(encdec.blocks[0]),
                                           count(encdec.decoder_blocks[0]))
    C, c = baseline.config.n_embed, encdec.config.n_embed
    assert (C, c, len(baseline.blocks), len(encdec.blocks), len(encdec.decoder_blocks)) == (160, 150, 26, 13, 13)
    assert layer == 12 * C ** 2 + 2 * C and encoder_layer == 12 * c ** 2 + 2 * c
    assert decoder_layer == 16 * c ** 2 + 4 * c and count(encdec.decoder_blocks[0].cross_attn) == 4 * c ** 2
    embedding, embedding_encdec = baseline.wte.weight.numel(), encdec.wte.weight.numel()
    layers, layers_encdec = baseline.num_params() - embedding, encdec.num_params() - embedding_encdec
    for n in (layer, encoder_layer, decoder_layer, 4 * c ** 2, layers, layers_encdec, embedding, embedding_encdec,
              baseline.num_params(), encdec.num_params(), layers_encdec - layers, embedding - embedding_encdec,
              baseline.wpe.weight.numel(), encdec.wpe.weight.numel()):
        assert f"{n:,}" in idea, n
    assert (baseline.num_params(), encdec.num_params()) == (16_036_800, 15_763_500)  # the write-up's own counts
    readme_idea = section("README.md", "## The idea").replace("\n", " ")
    assert (f"13 + 13 layers {c} wide ({encdec.num_params():,} parameters), is matched to a 26-layer baseline {C} wide "
            f"({baseline.num_params():,})") in readme_idea
    assert f"{baseline.wpe.num_embeddings} x {C} = {baseline.wpe.weight.numel():,}" in idea
    assert f"{encdec.wpe.num_embeddings} x {c} = {encdec.wpe.weight.numel():,}" in idea
    assert sum(p.numel() for p in baseline.parameters()) == baseline.num_params() + baseline.wpe.weight.numel()


@functools.lru_cache(maxsize=None)
def cpu_parameter_counts():
    """{(suite, run): parameters} of every model the CPU suites train, at the suite's vocabulary."""
    return {(suite, run): model_from(study.run_settings(suite, run)).num_params()
            for suite in ("byte", "gpt2", "gpt2_long", "gpt2_heldout", "gpt2_next")
            for run in study.SUITES[suite]["runs"] + study.SUITES[suite].get("pictures", [])}


def test_the_readme_gives_the_range_of_the_cpu_models_parameters():
    counts = cpu_parameter_counts().values()
    quoted = f"models of {min(counts) / 1e6:.2f}M to {max(counts) / 1e6:.2f}M parameters"
    for prose in (section("README.md", "## What the experiments found"), summary()):
        assert quoted in prose.replace("\n", " "), quoted


def test_results_md_counts_the_bare_encoder_decoder_apart_from_the_mse_variants():
    counts = cpu_parameter_counts()
    bare, mse = counts[("gpt2", "encdec_none")], counts[("gpt2", "encdec_mse")]
    assert mse - bare == 4 * 60  # LayerNorm_a and _b: a gain and a bias each
    assert f"{bare:,} parameters bare ({mse:,} with the embedding loss's two LayerNorms)" in \
        text("lab/results.md").replace("\n  ", " ")


def test_the_summary_gives_each_suites_training_tokens_per_parameter():
    """Training tokens (the regime table of lab/results.md, which --summary prints where the data is prepared) over
    the baseline's parameters, computed from its model."""
    row = next(line for line in text("lab/results.md").splitlines() if line.startswith("| training tokens |"))
    tokens = [int(cell.split()[0].replace(",", "")) for cell in row.split("|")[2:-1]]
    counts = cpu_parameter_counts()
    per_parameter = {suite: n / counts[(suite, "baseline")]
                     for suite, n in zip(["byte", "gpt2", "gpt2_long", "gpt2_heldout"], tokens[1:])}
    write_up = tokens[0] / study.WRITE_UP["params"]
    gpt2 = [per_parameter[suite] for suite in ("gpt2", "gpt2_long", "gpt2_heldout")]
    quoted = (f"{min(gpt2):.2f}-{max(gpt2):.2f} training tokens per parameter in the GPT-2-token suites, "
              f"{per_parameter['byte']:.2f} in the byte suite; the write-up's: {write_up:.1f}")
    assert quoted in summary().replace("\n  ", " "), quoted
    ratios = [write_up] + list(per_parameter.values())  # and the regime table's own row
    row = "| training tokens per parameter | " + " | ".join(f"{r:.2f}" for r in ratios) + " |"
    assert row in text("lab/results.md"), row


# -----------------------------------------------------------------------------
# intervals and counts from the logs


@pytest.mark.parametrize("name, suite, a, b, figure, which, decimals", [
    # bounds near a rounding edge are quoted as --summary prints them, to 4 decimals
    ("lab/results.md", "byte", "encdec_none", "baseline", "final_val", "raw", 4),
    ("lab/results.md", "byte", "encdec_none", "smaller_baseline", "final_val", "raw", 4),
    ("lab/results.md", "gpt2", "encdec_mse_pos_sub", "encdec_pos_sub", "best_val", "raw", 4),
    ("lab/results.md", "gpt2_long", "encdec_none", "baseline", "best_val", "adjusted", 4),
    ("lab/results.md", "gpt2_next", "encdec_none_rotary", "baseline_rotary", "best_val", "adjusted", 4),
    ("lab/results.md", "gpt2_next", "encdec_none_rotary", "baseline_rotary", "late_val", "adjusted", 3),
    ("lab/results.md", "gpt2_heldout", "encdec_none", "baseline", "late_val", "adjusted", 4),
    ("notebooks/02_loss_curves.ipynb", "byte", "encdec_none", "baseline", "final_val", "raw", 4),
    ("notebooks/02_loss_curves.ipynb", "byte", "encdec_none", "smaller_baseline", "final_val", "raw", 4),
    ("notebooks/02_loss_curves.ipynb", "gpt2", "encdec_mse_pos_sub", "encdec_pos_sub", "best_val", "raw", 4),
])
def test_a_quoted_interval_is_the_logs_rounded_once(name, suite, a, b, figure, which, decimals):
    row = claims(suite)[(a, b, figure)]
    ci = row["ci"] if which == "raw" else row["ci_adj"]
    quoted = interval(ci, decimals)
    if which == "raw":
        quoted = f"{signed(row['mean'], decimals)} {quoted}"
    prose = notebook_prose(name) if name.endswith(".ipynb") else text(name)
    assert quoted in prose.replace("\n  ", " ").replace("\n", " "), quoted


def test_the_summary_gives_the_late_val_gain_the_control_and_their_difference_with_holms_intervals():
    found = summary().replace("\n  ", " ")
    c = claims("gpt2_heldout")
    bare, control = c[("encdec_none", "baseline", "late_val")], c[("baseline_slow", "baseline", "late_val")]
    apart = c[("encdec_none", "baseline_slow", "late_val")]
    assert bare["adjusted"] == control["adjusted"] == "holds" and apart["adjusted"] == "not detected"
    for quoted in (f"is {-bare['mean']:.3f} below the baseline's (Holm-corrected interval "
                   f"{signed(bare['ci_adj'][0])} to {signed(bare['ci_adj'][1])})",
                   f"lower by about as much ({-control['mean']:.3f})",
                   f"baseline: {signed(apart['mean'])}, Holm {signed(apart['ci_adj'][0])} to "
                   f"{signed(apart['ci_adj'][1])})"):
        assert quoted in found, quoted
    rotary = claims("gpt2_next")[("encdec_none_rotary", "baseline_rotary", "late_val")]
    worse = claims("gpt2_next")[("baseline_rotary", "baseline", "late_val")]
    assert rotary["adjusted"] == "holds" and worse["adjusted"] == "contradicted"
    assert (f"worse than the usual one ({signed(worse['mean'])})" in found and
            f"late val is {-rotary['mean']:.3f} below the rotary baseline's (Holm {signed(rotary['ci_adj'][0])} to "
            f"{signed(rotary['ci_adj'][1])})" in found)


def test_results_md_counts_the_gpt2_suites_raw_intervals_that_exclude_zero():
    secondary = [r for r in claims("gpt2").values() if r["family"] == "secondary"]
    excluding = sum(r["raw"] != "not detected" for r in secondary)
    m = len(secondary)
    quoted = f"{excluding} of the {m} raw intervals exclude zero, where about {round(0.05 * m)} would (5% of {m})"
    assert quoted in text("lab/results.md").replace("\n  ", " "), quoted
    assert quoted in notebook_prose().replace("\n  ", " "), quoted  # the notebook's closing section repeats it


def test_the_rotary_lead_at_matched_train_loss_is_quoted_over_every_level():
    """The rotary encoder-decoder against the rotary baseline at equal train loss, 4.2 down to 3.3: the range of the
    means, and the levels whose raw interval excludes zero, as results.md and the README give them."""
    levels = [round(4.2 - 0.1 * i, 1) for i in range(10)]
    figures = study.fit_or_overfit(logs_of("gpt2_next"), "encdec_none_rotary", "baseline_rotary", levels)[:10]
    means = [p["mean"] for _, p in figures]
    results = text("lab/results.md").replace("\n  ", " ")
    for prose in (results, notebook_prose().replace("\n  ", " ")):
        assert f"the difference ranges from {signed(min(means))} to {signed(max(means))}" in prose
    assert f"shrinks to between {signed(min(means))} and {signed(max(means))}" in \
        summary().replace("\n  ", " ")
    excluding = [(level, p) for level, (_, p) in zip(levels, figures) if p["ci"][0] > 0 or p["ci"][1] < 0]
    quoted = " and ".join(f"{signed(p['mean'])} {interval(p['ci'])} at {level}" for level, p in excluding)
    assert len(excluding) == 2 and f"{quoted}, the two levels of ten" in results, quoted


# -----------------------------------------------------------------------------
# what was fixed before the runs: lab/README.md's commits, against the repository's history


def git(*args):
    """The output of a git command in the repository, or a skip where there is no history to read (no git, an
    unpacked archive, a shallow clone)."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("git is not available")
    if done.returncode != 0 or git_is_shallow():
        pytest.skip("no full git history here")
    return done.stdout


@functools.lru_cache(maxsize=None)
def git_is_shallow():
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    return done.returncode != 0 or done.stdout.strip() != "false"


def first_commit_adding(string):
    """The commit that first wrote `string` into study.py (at the top level before lab/ existed)."""
    out = git("log", "--reverse", "--abbrev=7", "--format=%h", "-S", string, "--", "study.py", "lab/study.py")
    return out.split()[0]


def log_commits(folder):
    """[(commit, files)] that added or changed a suite's log.jsonl files, oldest first (before lab/ existed:
    results/<folder>)."""
    out = git("log", "--reverse", "--diff-filter=AM", "--abbrev=7", "--format=@%h", "--name-only", "--",
              f"results/{folder}/*log.jsonl", f"lab/results/{folder}/*log.jsonl")  # the logs, not the study.json
    return [(block.split()[0], block.split()[1:]) for block in out.split("@") if block.strip()]


def is_ancestor(a, b):
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=ROOT).returncode == 0


def test_lab_readme_names_the_commits_that_fixed_each_suites_claims_in_the_order_it_says():
    families, next_steps = first_commit_adding("PRIMARY = ["), first_commit_adding("NEXT_STEPS = [")
    control = first_commit_adding('"baseline_slow", "baseline"')
    readme = text("lab/README.md")
    for commit in (families, next_steps, control):
        assert f"`{commit}`" in readme, commit
    for folder in ("cpu_study", "gpt2_study", "gpt2_long"):  # the families came after every log of these suites
        last = log_commits(folder)[-1][0]
        assert is_ancestor(last, families) and f"`{last}`" in readme, folder
    first = log_commits("gpt2_next")[0][0]  # gpt2_next's family came before its first log
    assert is_ancestor(next_steps, first) and next_steps != first and f"`{first}`" in readme
    heldout = log_commits("gpt2_heldout")  # the control's claims: after seed 0 of every run, before any other seed
    seed0 = [commit for commit, files in heldout if any("_seed0/" in f for f in files)]
    later = [commit for commit, files in heldout if any(re.search(r"_seed[1-9]/", f) for f in files)]
    assert len(seed0) == 2 and all(is_ancestor(commit, control) for commit in seed0)
    assert later and not any(is_ancestor(commit, control) for commit in later)
    assert f"`{seed0[-1]}`" in readme and f"`{later[0]}`" in readme and f"`{heldout[-1][0]}`" in readme


def test_the_summary_says_where_the_long_runs_turn_and_how_much_slower_the_control_learns():
    found = summary().replace("\n  ", " ")
    steps = [study.run_figures(log)["best_iter"] for runs in logs_of("gpt2_long").values() for log in runs.values()]
    assert f"From between steps {min(steps):,} and {max(steps):,} on, every model overfits" in found
    rate = lambda run: read_config(os.path.join(ROOT, study.config_file("gpt2_heldout", run)))["learning_rate"]
    assert f"a {100 * (1 - rate('baseline_slow') / rate('baseline')):.1f}% lower learning rate" in found
