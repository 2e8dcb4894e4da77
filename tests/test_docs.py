"""The numbers the README, docs/, lab/*.md and the notebooks' prose take from a notebook's saved output, a log, a
config or the model, computed again from that source: a sentence that drifts from what it quotes fails here. Also
what the documents must say alike (which comparisons were fixed before their runs), and that the README stays short.

    python -m pytest -q tests/test_docs.py
"""
import json
import math
import os
import re

from configurator import read_config
from conftest import ROOT
from lab import study
from model import ModelConfig
from test_figures import claims, cpu_parameter_counts, logs_of, section, signed, text

WALKTHROUGH, REVERSAL_STUDY = "notebooks/01_walkthrough.ipynb", "notebooks/03_reversal_study.ipynb"
README_MAX_CHARS = 14_000  # a stranger's page: the details behind one link, in lab/README.md and lab/results.md


def flat(prose):
    """Prose with its line breaks (and a bullet's indentation) as spaces, as a sentence reads."""
    return re.sub(r"\n\s*", " ", prose)


def cells(name):
    return {cell["id"]: cell for cell in json.loads(text(name))["cells"]}


def source(name, cell_id):
    return flat("".join(cells(name)[cell_id]["source"]))


def printed(name, cell_id):
    """What a code cell printed or displayed as markdown in the saved run."""
    out = []
    for output in cells(name)[cell_id].get("outputs", []):
        out.append("".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/markdown", "")))
    return "".join(out)


def markdown_table(name, cell_id, key=1):
    """{a row's first `key` cells, joined by ' | ': [its other cells]} of a table a cell displayed (header left out)."""
    lines = printed(name, cell_id).splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("|---")) + 1:]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in body if line.startswith("|")]
    return {" | ".join(row[:key]): row[key:] for row in rows}


def readme():
    return flat(text("README.md"))


def test_the_readme_does_not_grow():
    assert len(text("README.md")) <= README_MAX_CHARS


# -----------------------------------------------------------------------------
# the walk-through's saved run, and what the README and the notebooks quote of it


def test_the_walkthrough_and_the_readme_quote_the_run_time_the_kernel_printed():
    """The saved run's time as its kernel printed it; the README gives the time with a core free, which section 5
    records (the saved run's own, when it had one)."""
    seconds = int(re.search(r"notebook ran for (\d+) s \(QUICK=False\)", printed(WALKTHROUGH, "bd13cfc6"))[1])
    minutes = f"{seconds / 60:.1f} minutes"
    assert f"The run saved here took {seconds} s ({minutes})" in source(WALKTHROUGH, "6d3a8841")
    assert f"{seconds} s, as the kernel printed above" in source(WALKTHROUGH, "bc333c03")
    free = re.search(r"with a core free \(load average ([\d.]+)\), took (\d+) s", source(WALKTHROUGH, "bc333c03"))
    if free:  # the saved run had no core free: the README quotes the last one that had, and the saved one beside it
        assert float(free[1]) < 2  # fewer jobs than the 2 cores
        assert f"({seconds / 60:.1f} with none, as the saved run had)" in readme()
        seconds = int(free[2])
    assert f"step for step, in {seconds / 60:.1f} minutes on a 2-core CPU with a core free" in readme()


def test_the_quick_start_quotes_its_own_time_and_the_machine():
    quick_start = section("README.md", "## Quick start")
    done = float(re.search(r"^done: 400 iterations in ([\d.]+)s", quick_start, re.M)[1])
    assert f"The {done:.0f} s: an otherwise idle 2-core x86-64 CPU" in flat(quick_start)


def test_the_loss_at_full_accuracy_is_explained_with_the_probabilities_the_walkthrough_printed():
    out = printed(WALKTHROUGH, "loss-at-100-code")
    ce, right, digits, mean, least, runner = re.search(
        r"held-out cross-entropy ([\d.]+); the right digit comes first on ([\d.]+)% of the (\d+) digits, with "
        r"probability ([\d.]+) on average \(([\d.]+) at the least\); the runner-up gets ([\d.]+)", out).groups()
    assert float(right) == 100.0 and float(runner) < float(least)  # always first, never sure
    shows = source(WALKTHROUGH, "loss-at-100-shows")
    assert (f"only {mean} of the probability on average ({least} at the least), and {runner} to the runner-up" in shows
            and f"over the {digits} digits is the cross-entropy printed, {float(ce):.2f}" in shows)
    evals = {int(it): float(val) for it, val in re.findall(r"^eval (\d+): train loss [\d.]+, val loss ([\d.]+)",
                                                        text("README.md"), re.M)}
    assert f"({evals[350]:.2f} at step 350, {evals[400]:.2f} at step 400 in the quick start's output)" in shows
    assert f"{evals[400]:.2f}" == f"{float(ce):.2f}"  # the quick start's 480 sequences, scored in two ways
    assert (f"the loss is still {evals[400]:.2f}: the right digit comes first, but with only {mean} of the probability "
            f"on average") in readme()


def leak_lines():
    return [(masked == "causal (model.py)", int(seed), float(train), float(random), float(reversed_), float(back))
            for masked, seed, train, random, reversed_, back in re.findall(
                r"cross-attention (causal \(model\.py\)|without its mask \(what-if\)), seed (\d+): training loss "
                r"([\d.]+) over the last 10 steps; held-out cross-entropy on the input's random digits ([\d.]+), "
                r"the reversed digits ([\d.]+); held-out sequences written back ([\d.]+)%",
                printed(WALKTHROUGH, "9f3aa716"))]


def span(values, fmt):
    return f"{format(min(values), fmt)} to {format(max(values), fmt)}"


def test_the_leak_is_quoted_over_every_seed_in_the_walkthrough_and_the_readme():
    lines = leak_lines()
    (_, _, _, random, reversed_, back), = [line for line in lines if line[0]]
    leaky = [line for line in lines if not line[0]]
    assert len(leaky) == 3 and back == 100.0
    train, random_leaky, back_leaky = ([line[i] for line in leaky] for i in (2, 3, 5))
    assert max(random_leaky) < math.log(9) < random and max(back_leaky) < 100  # below chance, yet never all back
    shows = source(WALKTHROUGH, "499ddae1")
    for quoted in (f"is {random:.2f} nats", f"the reversed digits ({reversed_:.2f})", f"({span(train, '.2f')} over the",
                   f"the random digits too ({span(random_leaky, '.2f')} nats)",
                   f"writes back only {min(back_leaky):.1f}% to {max(back_leaky):.1f}% of the held-out sequences"):
        assert quoted in shows, quoted
    assert (f"({span(random_leaky, '.2f')} nats against {random:.2f} with the mask); generating, it writes back only "
            f"{min(back_leaky):.1f} to {max(back_leaky):.1f}% of them, by seed") in readme()
    seed0 = next(line[5] for line in leaky if line[1] == 0)
    assert f"writes back 19.2% instead of {seed0:.1f}%" in source(WALKTHROUGH, "bc333c03")


def test_the_collapse_is_quoted_over_every_seed_and_shows_the_mechanism_the_text_gives():
    out = printed(WALKTHROUGH, "8debc097")
    losses = {(affine == "True", int(seed)): float(loss) for affine, seed, loss in re.findall(
        r"embedding_ln_affine=(True|False), seed (\d+): held-out sequences right [\d.]+%, final embedding loss (\S+)",
        out)}
    rows = [tuple(map(float, row)) for row in re.findall(
        r"seed (\d+), step 800: \|gain_a\| ([\d.]+), \|gain_b\| ([\d.]+), \|bias_a - bias_b\| [\d.]+; "
        r"LayerNorm_a\(E\), root mean square over positions and channels: its size ([\d.]+), its distance from its "
        r"mean ([\d.]+), from bias_b ([\d.]+)", out)]
    assert len(rows) == 3 and len(losses) == 4
    _, gain_a, gain_b, size, spread, from_b = zip(*rows)
    # the mechanism: LayerNorm_b's gain collapses, LayerNorm_a's does not; LayerNorm_a's output is small and sits on
    # bias_b (no farther from it than a few percent beyond its own spread)
    assert max(gain_b) < 0.1 < min(gain_a) and max(size) < 0.1
    assert all(b <= 1.05 * s + 0.001 for b, s in zip(from_b, spread))
    learnable = [loss for (affine, _), loss in losses.items() if affine]
    shows = source(WALKTHROUGH, "efdb013d")
    for quoted in (f"falls from 0.8 to between {min(learnable):.1e} and {max(learnable):.1e} in 800",
                   f"from a norm of 8 to between {min(gain_b):.3f} and {max(gain_b):.3f}",
                   f"from a norm of 8 to between {min(gain_a):.2f} and {max(gain_a):.2f} (about a tenth)",
                   f"a root mean square of {span(size, '.3f')}", f"stays near {losses[False, 0]:.2f}"):
        assert quoted in shows, quoted
    assert spread[0] == from_b[0] and f"(both {spread[0]:.3f} on seed 0)" in shows


def test_the_collapse_says_in_the_walkthroughs_numbers_how_the_embeddings_move():
    """LayerNorm_a's gain shrinks to about a tenth; the embeddings do the rest: their normalised form leaves the
    channels where gain_a is large, and its mean makes up the gap between the biases. Each figure, from the cell that
    prints it."""
    rows = [tuple(map(float, row)) for row in re.findall(
        r"seed (\d+): gain_a's norm 8 -> ([\d.]+); normalised E puts (\d+)% of its square in the half of the channels "
        r"where gain_a is largest at step 0, (\d+)% trained; gain_a \* normalised E, root mean square: ([\d.]+) with "
        r"step 0's E, ([\d.]+) with the trained E; its mean plus bias_a lies ([\d.]+) from bias_b \(bias_a alone "
        r"([\d.]+)\); LayerNorm_a\(E\) from bias_b: ([\d.]+) with step 0's E, ([\d.]+) trained",
        printed(WALKTHROUGH, "collapse-how-code"))]
    assert len(rows) == 3
    _, gain_a, share0, share1, part0, part1, mean_gap, bias_gap, from_b0, from_b1 = zip(*rows)
    assert all(g < 8 / 5 for g in gain_a)  # shrunk, not kept
    assert all(s1 < s0 for s0, s1 in zip(share0, share1)) and all(p1 < p0 for p0, p1 in zip(part0, part1))
    assert all(m < b for m, b in zip(mean_gap, bias_gap)) and all(f1 < f0 for f0, f1 in zip(from_b0, from_b1))
    shows = source(WALKTHROUGH, "efdb013d")
    for quoted in (f"holds {span(share0, '.0f')}% of its square at step 0, {span(share1, '.0f')}% once trained",
                   f"shrinks from a root mean square of {min(part0):.3f}-{max(part0):.3f} to {min(part1):.3f}-"
                   f"{max(part1):.3f}",
                   f"it lies {span(mean_gap, '.3f')} from bias_b, where bias_a alone is {span(bias_gap, '.3f')} away",
                   f"on step 0's embeddings would put out vectors {min(from_b0):.3f}-{max(from_b0):.3f} from bias_b; "
                   f"on the trained embeddings, {min(from_b1):.3f}-{max(from_b1):.3f}"):
        assert quoted in shows, quoted


def test_the_copy_shares_are_quoted_and_the_self_attention_points_at_the_digit_as_much_or_more():
    table = markdown_table(WALKTHROUGH, "f0260878", key=2)
    shares = {(model, family): float(table[f"{model} | {family}"][0])
              for model in ("encdec, bare", "encdec + both (default)") for family in ("decoder self", "decoder cross")}
    bare = shares["encdec, bare", "decoder self"], shares["encdec, bare", "decoder cross"]
    both = shares["encdec + both (default)", "decoder self"], shares["encdec + both (default)", "decoder cross"]
    assert bare[0] > bare[1] and both[0] >= both[1] - 0.01
    quoted = (f"as much or more (in the bare one {bare[0]:.2f} of the weight against the cross-attention's "
              f"{bare[1]:.2f}; with both additions {both[0]:.2f} against {both[1]:.2f})")
    assert quoted in source(WALKTHROUGH, "13c177e5"), quoted


def test_the_readme_quotes_the_walkthroughs_table_and_read_outs():
    table = markdown_table(WALKTHROUGH, "d1ed201c")
    mean = {model: float(row[1].split("±")[0]) for model, row in table.items()}
    per_seed = {model: [int(s) for s in row[2].split(",")] for model, row in table.items()}
    assert all(mean[m] == 100.0 for m in mean if m.startswith("encdec")) and mean["baseline, 5 layers"] == 100.0
    two = "baseline, 2 layers"
    walkthrough = flat(section("README.md", "## The walk-through notebook"))
    assert (f"a 2-layer baseline gets {mean[two]:.0f}% ({min(per_seed[two])} to {max(per_seed[two])}% by seed), the "
            f"parallel variant (bare) {mean['parallel, bare']:.0f}%") in walkthrough
    lens = {model: [tuple(map(int, pair)) for pair in re.findall(r"(\d+)/(\d+)", line)]
            for model, line in re.findall(r"^(encdec[^:]*): (.*)$", printed(WALKTHROUGH, "9299bd15"), re.M)}
    encoder = [pair for model in lens for pair in lens[model][1:3]]  # enc 1, enc 2
    assert f"readable form ({min(p[0] for p in encoder)}-{max(p[0] for p in encoder)}%)" in walkthrough
    assert f"finds {min(p[1] for p in encoder)}-{max(p[1] for p in encoder)}% of them" in walkthrough


# -----------------------------------------------------------------------------
# the reversal-study notebook against its own tables and the walk-through's


def test_the_reversal_study_says_what_differs_from_the_walkthrough_with_both_notebooks_figures():
    ours = markdown_table(REVERSAL_STUDY, "203223c0", key=2)  # layers | model: parameters, sequence acc., ...
    walkthrough = markdown_table(WALKTHROUGH, "d1ed201c")
    seq = {key: row[1].split(" ±")[0] for key, row in ours.items()}
    first = source(REVERSAL_STUDY, "a9793580")
    assert (f"with 2 layers per side {seq['2 | encdec']}% against {seq['4 | baseline']}% for the 4-layer baseline"
            in first)
    assert (f"the parallel variant gets {seq['2 | parallel']}% ({walkthrough['parallel, bare'][1].split(' ±')[0]}% in "
            f"the walk-through)") in first
    assert walkthrough["baseline, 5 layers"][2] == "100, 100, 100"  # "on every seed"
    splits = markdown_table(REVERSAL_STUDY, "621f879a")
    assert f"{int(splits['train'][0]):,} training sequences, {splits['train'][5]} of them of length 5" in first
    assert "190 steps of 64" in first and "400 steps of 32" in first


def test_the_reversal_studys_checks_are_quoted_with_their_seeds():
    checks = markdown_table(REVERSAL_STUDY, "3f643b63")  # run: seeds, sequence acc., token acc., lengths 3-5
    longer, no_loss = checks["parallel, 2 layers, 3x epochs"], checks["parallel, 2 layers, no embedding loss"]
    assert checks["baseline, 2 layers, 3x epochs"][:2] == ["1", "100.0 ± 0.0"] and longer[0] == no_loss[0] == "1"
    why = source(REVERSAL_STUDY, "b918b0f4")
    assert (f"on seed 0 only, the 2-layer `baseline` reaches 100% and the 2-layer `parallel` "
            f"{longer[1].split(' ±')[0]}% (still {longer[3]}% at length 3)") in why
    with_loss = markdown_table(REVERSAL_STUDY, "203223c0", key=2)["2 | parallel"][1]
    assert f"`parallel`'s seed 0 reaches {no_loss[1].split(' ±')[0]}%, against {with_loss}% over three seeds" in why
    masked = checks["vanilla, 1 layer, causal cross-attention"]
    assert masked[0] == "3" and f"our 1-layer model falls to {masked[1]}%" in why


# -----------------------------------------------------------------------------
# docs/reproduce.md and lab/results.md against the logs and the models


def test_reproduce_md_gives_the_cpu_models_sizes_and_training_data_as_results_md_and_the_models_do():
    counts = cpu_parameter_counts().values()
    row = next(line for line in text("lab/results.md").splitlines() if line.startswith("| training tokens |"))
    tokens = [cell.split()[0] for cell in row.split("|")[2:-1]]  # the write-up, byte, gpt2, gpt2_long, gpt2_heldout
    quoted = (f"models of {min(counts) / 1e6:.2f}M to {max(counts) / 1e6:.2f}M parameters trained on {tokens[2]} or "
              f"{tokens[4]} GPT-2 tokens, or on {tokens[1]} bytes")
    assert quoted in flat(text("docs/reproduce.md")), quoted


def test_why_mse_x1_is_the_cpu_suites_best_is_quoted_from_the_logs():
    logs = logs_of("gpt2")
    best = {run: sum(study.run_figures(log)["best_val"] for log in logs[run].values()) / len(logs[run])
            for run in ("encdec_mse_pos_sub_coeff1", "encdec_mse_pos_sub")}
    x1, x8 = best["encdec_mse_pos_sub_coeff1"], best["encdec_mse_pos_sub"]
    assert x1 < x8 and study.SUITES["gpt2"]["best"] == "encdec_mse_pos_sub_coeff1"
    assert f"(mean best val {x1:.3f} against {x8:.3f})" in flat(text("docs/reproduce.md"))
    assert f"its mean best val, {x1:.3f}, was below the x8 one's, {x8:.3f}" in flat(text("lab/results.md"))


def test_reproduce_md_predicts_from_the_60_article_suite_and_its_control():
    c = claims("gpt2_heldout")
    bare_best, best_best = c[("encdec_none", "baseline", "best_val")], c[("encdec_mse_pos_sub_coeff1", "baseline",
                                                                          "best_val")]
    bare, best = c[("encdec_none", "baseline", "late_val")], c[("encdec_mse_pos_sub_coeff1", "baseline", "late_val")]
    control, apart = c[("baseline_slow", "baseline", "late_val")], c[("encdec_none", "baseline_slow", "late_val")]
    assert (bare["adjusted"], best["adjusted"], control["adjusted"], apart["adjusted"]) == \
        ("holds", "not detected", "holds", "not detected")
    prose = flat(text("docs/reproduce.md"))
    lo, hi = (signed(x) for x in bare["ci_adj"])
    for quoted in (f"(bare {signed(bare_best['mean'])}, MSE x1 + pos sub {signed(best_best['mean'])})",
                   (f"the bare encoder-decoder is lower, {signed(bare['mean'])} (Holm-adjusted [{lo}, {hi}]: holds), "
                    f"MSE x1 + pos sub {signed(best['mean'])} (not detected)"),
                   f"lower by about as much ({signed(control['mean'])}, holds; exploratory",
                   (f"not told apart from it ({signed(apart['mean'])}, Holm [{signed(apart['ci_adj'][0])}, "
                    f"{signed(apart['ci_adj'][1])}])")):
        assert quoted in prose, quoted


def test_the_parallel_variants_settings_table_matches_the_configs_and_the_notebooks():
    """docs/model_flags.md names the draft's settings once, and which settings each result with `parallel` used."""
    flags_md = text("docs/model_flags.md")
    table = section("docs/model_flags.md", "## The draft's parallel model")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| where")]
    seen = set()
    for where, loss, sub, added in rows:
        for config in re.findall(r"`(config/[\w]+\.py)`", where):
            settings = read_config(os.path.join(ROOT, config))
            c = ModelConfig(**{k: v for k, v in settings.items() if k in ModelConfig.flags()})
            assert c.variant == "parallel", config
            assert loss == f"MSE x{c.embedding_loss_coeff:g}" and c.embedding_loss == "mse", config
            assert sub == ("yes" if c.sub_pos_embed != "no" else "no") and added == ("yes" if c.add_pos_embed_to_decoder
                                                                                  else "no"), config
            seen.add(config)
        if "03_reversal_study" in where:  # model.py's defaults: nothing passed but the shape
            defaults = ModelConfig(variant="parallel")
            assert (loss, sub, added) == (f"MSE x{defaults.embedding_loss_coeff:g}", "yes", "no")
            assert 'ModelConfig(variant=name, vocab_size=VOCAB + 3' in text(REVERSAL_STUDY)
        if "01_walkthrough" in where:
            assert (loss, sub, added) == ("none", "no", "no")
            models = "".join(cells(WALKTHROUGH)["c22f1339"]["source"])
            assert '"parallel, bare": dict(variant="parallel", **BARE)' in models
    assert seen == {f"config/{name}" for name in os.listdir(os.path.join(ROOT, "config")) if "parallel" in name}
    assert "disaffinity" not in flags_md and "`yes_ln`: then a LayerNorm" in flags_md


# -----------------------------------------------------------------------------
# what every document says alike


def test_every_document_says_the_same_comparisons_were_fixed_before_their_runs():
    """The next steps' family and the 60-article suite's repeat of the primary comparisons, nothing else."""
    statements = {
        "README.md": section("README.md", "## What the experiments found"),
        "lab/README.md": text("lab/README.md"),
        "lab/results.md": text("lab/results.md"),
        "notebooks/02_loss_curves.ipynb": source("notebooks/02_loss_curves.ipynb", "ed7dbd2f"),
    }
    for name, prose in statements.items():
        sentence = re.search(r"Only (?:[^.]|\.\d)*? w(?:ere|as) written down before[^.]*\.", flat(prose))
        assert sentence, name
        said = sentence[0]
        assert re.search(r"next steps|gpt2_next|last family", said) and re.search(r"60-article|gpt2_heldout", said), \
            (name, said)


def test_the_walkthrough_writes_no_file_unless_asked_to_redraw_the_readmes_pictures(tmp_path):
    """Its only writes are the README's pictures, through save(), which writes only when DRAW_README_FIGURES is set."""
    code = [("".join(cell["source"]), cell_id) for cell_id, cell in cells(WALKTHROUGH).items()
            if cell["cell_type"] == "code"]
    assert sum(src.count("savefig(") for src, _ in code) == 1 and not any("open(" in src for src, _ in code)
    setup = next(src for src, _ in code if "def save(fig, name):" in src)
    definition = setup[setup.index("def save(fig, name):"):]
    import matplotlib
    matplotlib.use("Agg")  # no window
    import matplotlib.pyplot as plt
    for asked in (False, True):
        namespace = {"os": os, "QUICK": False, "DRAW_README_FIGURES": asked, "FIGURES": str(tmp_path / str(asked))}
        exec(definition, namespace)
        fig = plt.figure()
        namespace["save"](fig, "picture.png")
        plt.close(fig)
        assert (tmp_path / str(asked) / "picture.png").exists() == asked
    assert 'DRAW_README_FIGURES = os.environ.get("DRAW_README_FIGURES") == "1"' in setup


# -----------------------------------------------------------------------------
# the README as a stranger reads it


def test_the_readmes_findings_take_at_most_ten_lines_and_keep_the_verdict_words():
    """The details (intervals, Holm, late val) are lab/results.md's summary; the README says what they mean."""
    found = section("README.md", "## What the experiments found").splitlines()[1:]
    assert len([line for line in found if line.strip()]) <= 10
    words = flat("\n".join(found))
    assert "not detected" in words and "Holm" not in words and "[" not in words  # no interval, no test's name
    assert "(README.md) gives the history" in flat(section("lab/results.md", "## In short: what the experiments found"))


def test_the_readme_runs_the_walkthrough_headless_and_nothing_rewrites_the_tracked_notebook():
    command = "jupyter nbconvert --to notebook --execute notebooks/01_walkthrough.ipynb --output-dir /tmp\n"
    assert command in text("README.md")  # a line of its own, to copy
    last = source(WALKTHROUGH, "bc333c03")
    assert "--output-dir /tmp" in last and "notebooks/01_walkthrough.ipynb" in last
    for name in ("README.md", "lab/README.md", WALKTHROUGH, "notebooks/02_loss_curves.ipynb", REVERSAL_STUDY):
        assert "--inplace" not in text(name), name


def test_the_write_ups_final_embedding_loss_is_quoted_alike_everywhere():
    """The write-up's MSE runs end at an embedding loss of 4.1e-9 and 4.7e-9: "4e-9" wherever it is quoted."""
    quoted = re.findall(r"\b\d(?:\.\d+)?e-0?9\b", text("lab/results.md") + text("notebooks/02_loss_curves.ipynb"))
    assert quoted and set(quoted) == {"4e-9"}, quoted


def test_the_write_ups_best_is_said_to_weight_its_embedding_loss_as_its_config_does():
    coeff = read_config(os.path.join(ROOT, "config/paper_encdec_mse_pos_sub.py"))["embedding_loss_coeff"]
    cpu = read_config(os.path.join(ROOT, "config/cpu_encdec_mse_pos_sub.py"))["embedding_loss_coeff"]
    assert coeff == cpu == ModelConfig(variant="encdec").embedding_loss_coeff == 8
    summary = flat(section("lab/results.md", "## In short: what the experiments found"))
    assert f"whose embedding loss the write-up weighted {coeff:g}, here weighted 1" in summary
    assert f"added to the cross-entropy with weight {coeff:g}" in readme()


def test_the_readme_says_sampling_needs_only_the_runs_folder_whose_checkpoint_records_what_it_trained_on():
    """As sample.py and evaluate.py read it (tests/test_sample.py: a broken data/ meta.json changes no sample)."""
    assert "need only the run's folder: the checkpoint records what the run trained on" in readme()
    assert "rewriting `log.jsonl` from the checkpoint (a `log.jsonl` that differs is kept whole" in readme()


def test_mfu_is_defined_where_the_readme_first_uses_it():
    first = readme().index("MFU")
    assert readme()[first:].startswith("MFU** (model FLOPs utilisation: ")


def test_the_readme_shows_the_cards_command_with_what_it_prints_and_those_commands_exist():
    """The card's command, then its message: the one command that prepares its data (the WikiText-103 row of the
    README's table) and the CPU config of the same model, which exists and trains the encoder-decoder with MSE."""
    training = section("README.md", "## Training on text")
    command, printed_ = re.findall(r"```(?:bash)?\n(.*?)```", training, re.S)[:2]
    assert command.strip() == "python train.py --variant=encdec --embedding_loss=mse"
    assert printed_.startswith("error: data/wikitext103 is not prepared. This run trains the write-up's encdec model")
    prepare, cpu = re.findall(r":  (python \S+(?: \S+)?)\n", printed_)
    assert prepare == "python prepare_wikipedia.py" and f"| `{prepare}` (WikiText-103) |" in training
    config = read_config(os.path.join(ROOT, cpu.split()[-1]))
    assert cpu == "python train.py config/cpu_encdec_mse_pos_sub.py"
    assert (config["variant"], config["embedding_loss"], config["sub_pos_embed"]) == ("encdec", "mse", "yes")


def test_the_readme_says_what_a_first_byte_runs_samples_look_like_at_its_loss_and_when_words_appear():
    """A 300-step byte run samples unreadable bytes: the README says so at the loss such a run reaches (the val loss it
    quotes for config/cpu_baseline.py's 300 steps lies in the range it gives), and at what lower loss words appear."""
    prose = flat(readme())
    paragraph = re.search(r"\*\*What a first text run samples\.\*\* (.*?)\*\*Two validation losses", prose)[1]
    low, high = map(float, re.search(r"At a 300-step run's ([\d.]+)-([\d.]+),", paragraph).groups())
    logged = float(re.search(r"`config/cpu_baseline.py`: ([\d.]+) against", prose)[1])
    assert low <= logged <= high
    assert "not a bug" in paragraph
    words = float(re.search(r"Near ([\d.]+) the short common words come out right", paragraph)[1])
    assert words < low
