"""Specifications of model.py: the write-ups' parameter counts, causality, the KV cache, the embedding loss.

    python -m pytest -q test_model.py
"""

import inspect
import itertools
import re

import pytest
import torch
import torch.nn.functional as F

from model import (EMBEDDING_LOSS_DEFAULTS, ENCODER_DECODER_DEFAULTS, Attention, ModelConfig, build_model,
                   LinearCrossEntropy, causal_attention, cumulative_average, logits_needed, rotate,
                   row_cross_entropy)

TINY = dict(vocab_size=37, context_size=12, n_embed=16, n_head=2, n_layer=2)


def tiny_model(vocab_size=50, context_size=16, **flags):
    """A one-layer model of width 16, the same weights each call, in eval mode."""
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=vocab_size, context_size=context_size, n_layer=1, n_embed=16, n_head=2,
                                   **flags)).eval()


def tiny(**flags):
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**TINY, **flags}))
    with torch.no_grad():  # LayerNorms start at weight 1, bias 0: make them non-trivial so formulas are really checked
        for name, p in model.named_parameters():
            if "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def tokens(B=3, T=12, seed=1):
    return torch.randint(0, TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


# --- 1. the parameter counts in the tables of the write-up and its draft (vocab 50257, no bias, context 200) ---

@pytest.mark.parametrize("flags, expected", [
    (dict(variant="encdec", n_embed=150, n_head=5, n_layer=13, embedding_loss="mse", embedding_ln="init",
          encoder_out_ln=True, sub_pos_embed="yes"), 15_763_500),
    (dict(variant="encdec", n_embed=150, n_head=5, n_layer=13, embedding_loss="none", sub_pos_embed="no"), 15_762_900),
    (dict(variant="baseline", n_embed=160, n_head=10, n_layer=26), 16_036_800),
    (dict(variant="baseline", n_embed=156, n_head=12, n_layer=26), 15_441_192),
    (dict(variant="baseline", n_embed=210, n_head=10, n_layer=10), 15_850_380),
    (dict(variant="parallel", n_embed=200, n_head=5, n_layer=5, embedding_loss="mse"), 15_698_400),
])
def test_parameter_counts_match_the_write_up_tables(flags, expected):
    model = build_model(ModelConfig(vocab_size=50257, context_size=200, bias=False, **flags))
    assert model.num_params() == expected


def test_num_params_excludes_positional_embedding_and_counts_tied_output_once():
    model = tiny(variant="baseline")
    every_tensor = sum(p.numel() for p in model.state_dict().values())  # the tied weight appears twice here
    assert model.lm_head.weight is model.wte.weight
    assert model.num_params() == every_tensor - model.wte.weight.numel() - model.wpe.weight.numel()


# --- 2. no future leakage, for every variant and flag combination ---

def valid_flag_combinations():
    """Every value of every flag on both encoder-decoders (the others at their defaults), plus combinations of them."""
    combos = [dict(variant="baseline", sub_pos_embed=s) for s in ("no", "yes", "yes_ln")]
    combos += [dict(variant="baseline", rotary=True), dict(variant="baseline", rotary=True, sub_pos_embed="yes")]
    one_at_a_time = [dict(embedding_loss=v) for v in ("none", "mse", "cosine", "log_cosine")] + \
        [dict(embedding_ln=v) for v in ("none", "init", "avg_cum_sum")] + [dict(encoder_out_ln=False)] + \
        [dict(detach=v) for v in ("none", "embedding")] + [dict(sub_pos_embed=v) for v in ("no", "yes_ln")] + \
        [dict(add_pos_embed_to_decoder=True), dict(decoder_order="cross_first"),
         dict(n_encoder_layer=3, n_decoder_layer=1), dict(rotary=True),
         dict(rotary=True, embedding_loss="none", sub_pos_embed="no")]
    together = [dict(embedding_loss=loss, embedding_ln=ln, sub_pos_embed=sub, add_pos_embed_to_decoder=True,
                     decoder_order="cross_first", n_encoder_layer=3, n_decoder_layer=1, detach="none")
                for loss, ln, sub in (("cosine", "avg_cum_sum", "yes_ln"), ("log_cosine", "none", "yes"),
                                      ("mse", "init", "no"))]
    for variant in ("encdec", "parallel"):
        combos += [dict(variant=variant, **flags) for flags in one_at_a_time + together]
    return combos


@pytest.mark.parametrize("flags", valid_flag_combinations(), ids=lambda f: "-".join(str(v) for v in f.values()))
def test_no_position_sees_a_later_token(flags):
    model = tiny(**flags).eval()
    idx = tokens()
    logits, _, _ = model(idx, idx)
    dissimilarity = encoder_and_embedding_terms(model, idx)
    for t in (1, 6, 11):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % TINY["vocab_size"]
        logits2, _, _ = model(changed, changed)
        assert torch.equal(logits[:, :t], logits2[:, :t]), f"logits before position {t} changed"
        assert not torch.allclose(logits[:, t:], logits2[:, t:])  # the change is seen from t on
        if dissimilarity is not None:
            assert torch.equal(dissimilarity[:, :t], encoder_and_embedding_terms(model, changed)[:, :t])


def encoder_and_embedding_terms(model, idx):
    """Per-position embedding dissimilarity (B, T) of the forward pass, or None without an embedding loss."""
    if model.config.embedding_loss == "none":
        return None
    E, encoder_out = capture_E_and_encoder_out(model, idx)
    return model.embedding_dissimilarity(E, encoder_out)


def capture_E_and_encoder_out(model, idx):
    seen = {}
    h1 = model.drop.register_forward_hook(lambda m, i, out: seen.setdefault("E", out))
    h2 = model.blocks[-1].register_forward_hook(lambda m, i, out: seen.setdefault("encoder_out", out))
    model(idx, idx)
    h1.remove(), h2.remove()
    return seen["E"], seen["encoder_out"]


# --- 3. the KV cache ---

DECODE_FLAGS = [  # every flag that changes the decoding path, and head sizes that need padding (4 here)
    dict(variant="baseline"), dict(variant="baseline", sub_pos_embed="yes"),
    dict(variant="baseline", sub_pos_embed="yes_ln", n_head=4),
    dict(variant="encdec"), dict(variant="encdec", decoder_order="cross_first", add_pos_embed_to_decoder=True),
    dict(variant="encdec", sub_pos_embed="yes_ln", encoder_out_ln=False, embedding_ln="avg_cum_sum", cross_n_head=2),
    dict(variant="encdec", embedding_loss="none", sub_pos_embed="no", n_encoder_layer=3, n_decoder_layer=1),
    dict(variant="parallel", n_encoder_layer=3, n_decoder_layer=2),
    dict(variant="parallel", add_pos_embed_to_decoder=True, sub_pos_embed="yes_ln", decoder_order="cross_first"),
    # rotary positions in every variant, with and without a learned table for pos sub; odd head sizes (5 and 3)
    dict(variant="baseline", rotary=True), dict(variant="baseline", rotary=True, sub_pos_embed="yes"),
    dict(variant="encdec", rotary=True), dict(variant="encdec", rotary=True, embedding_loss="none", sub_pos_embed="no"),
    dict(variant="encdec", rotary=True, n_embed=15, n_head=3, cross_n_head=5, decoder_order="cross_first"),
    dict(variant="parallel", rotary=True, add_pos_embed_to_decoder=True, n_decoder_layer=1)]


@pytest.mark.parametrize("flags", DECODE_FLAGS)
def test_cached_step_by_step_logits_equal_the_full_forward(flags):
    model = tiny(**flags).eval()
    idx = tokens(T=10)
    full, _, _ = model(idx, idx)
    cache = {}
    first = model.hidden_states(idx[:, :4], cache)[0]  # prefill with a prompt, then one token at a time
    steps = [first[:, -1:]] + [model.hidden_states(idx[:, t:t + 1], cache, start=t)[0] for t in range(4, 10)]
    torch.testing.assert_close(model.lm_head(torch.cat(steps, dim=1)), full[:, 3:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant, attention_modules",
                         [("baseline", 2), ("encdec", 2 + 2 * 2), ("parallel", 2 + 2 * 2)])
def test_cache_is_preallocated_per_attention_module_and_written_in_place(variant, attention_modules):
    model = tiny(variant=variant).eval()
    cache = {}
    model.hidden_states(tokens(T=5), cache)
    modules = [m for m in model.modules() if isinstance(m, Attention)]  # each has its buffer and its length
    assert set(cache) == set(modules) and len(modules) == attention_modules  # encoder, decoder, cross-attention
    buffers = {module: cache[module][0] for module in modules}
    storage = {module: kv.data_ptr() for module, kv in buffers.items()}
    model.hidden_states(tokens(T=1), cache, start=5)  # one more position, written where the first step left off
    for module, kv in buffers.items():  # (keys / values, B, heads, whole context, head size padded to 8)
        assert cache[module][0] is kv and cache[module][1] == 6
        assert kv.shape == (2, 3, module.n_head, TINY["context_size"], 8) and kv.data_ptr() == storage[module]
        assert kv[:, :, :, :6].abs().sum(dim=-1).ne(0).all() and not kv[:, :, :, 6:].any()


def test_a_cache_takes_the_prompt_then_one_token_at_a_time():
    model = tiny(variant="encdec").eval()
    cache = {}
    model.hidden_states(tokens(T=5), cache)
    with pytest.raises(AssertionError, match="one token at a time"):  # two at once would need a mask: refused
        model.hidden_states(tokens(T=2), cache, start=5)


@pytest.mark.parametrize("flags", DECODE_FLAGS)
def test_greedy_generation_with_cache_equals_without_also_past_context_size(flags):
    model = tiny(**flags, dropout=0.1).eval()
    with torch.no_grad():  # larger layer weights: at init an untrained model may just repeat the last token
        for name, p in model.named_parameters():
            if p.dim() == 2 and name not in ("wte.weight", "lm_head.weight"):
                p.mul_(10)
    prompt = tokens(B=2, T=5)
    new = 2 * TINY["context_size"]  # the window slides for most of these steps
    with_cache = model.generate(prompt, new, top_k=1, use_cache=True)
    without = model.generate(prompt, new, top_k=1, use_cache=False)
    assert with_cache.shape == (2, 5 + new)
    assert torch.equal(with_cache, without)
    assert len(set(with_cache[0, 5:].tolist())) > 1  # not a degenerate repeated token


@pytest.mark.parametrize("variant", ["baseline", "encdec"])
def test_greedy_generation_appends_the_argmax_of_the_forward_logits(variant):
    model = tiny(variant=variant).eval()
    idx = tokens(B=2, T=3)
    expected = idx
    for _ in range(6):  # the plain forward pass, step by step, with the output layer as nn.Linear
        logits, _, _ = model(expected)
        expected = torch.cat([expected, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    assert torch.equal(model.generate(idx, 6, top_k=1), expected)


def test_sampling_draws_from_the_top_k_only():
    model = tiny(variant="encdec").eval()
    idx = tokens(B=1, T=4)
    logits, loss, terms = model(idx)
    assert logits.shape == (1, 1, TINY["vocab_size"]) and loss is None and terms is None  # the last position only
    top3 = set(logits[0, -1].topk(3).indices.tolist())
    torch.manual_seed(0)
    drawn = {model.generate(idx, 1, temperature=5.0, top_k=3)[0, -1].item() for _ in range(40)}
    assert drawn == top3  # a high temperature spreads the draws over all three, and never beyond them


def test_generation_reads_only_the_last_context_size_tokens():
    model = tiny(variant="encdec").eval()
    long = tokens(B=1, T=30)
    out1 = model.generate(long, 3, top_k=1)
    out2 = model.generate(torch.cat([tokens(B=1, T=5, seed=9), long], dim=1), 3, top_k=1)
    assert torch.equal(out1[:, -3:], out2[:, -3:])


# --- 4. where the embedding loss sends gradient ---

def gradients(model, idx, train):
    model.train(train)
    model.zero_grad()
    model(idx, idx)[1].backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def embedding_loss_gradients(model, idx):
    """Gradient of coeff x embedding loss alone: train-mode loss minus eval-mode loss (dropout is 0)."""
    with_loss, ce_only = gradients(model, idx, True), gradients(model, idx, False)
    return {n: with_loss[n] - ce_only[n] for n in with_loss}


@pytest.mark.parametrize("variant", ["encdec", "parallel"])
def test_detached_encoder_out_gets_no_gradient_from_embedding_loss(variant):
    grads = embedding_loss_gradients(tiny(variant=variant, detach="encoder_out"), tokens())
    encoder = {n: g for n, g in grads.items() if n.startswith("blocks.")}
    assert encoder and all(g.abs().max() < 1e-7 for g in encoder.values())
    assert grads["wpe.weight"].abs().max() > 1e-5  # the embeddings do learn from it
    assert grads["ln_encoder_out.weight"].abs().max() > 1e-5


def test_undetached_embedding_loss_also_trains_the_encoder():
    grads = embedding_loss_gradients(tiny(variant="encdec", detach="none"), tokens())
    assert max(g.abs().max() for n, g in grads.items() if n.startswith("blocks.")) > 1e-5


def test_embedding_loss_gradient_splits_into_the_direct_and_the_encoder_path():
    # detach=embedding keeps only the path through the encoder, detach=encoder_out only the direct path to E
    both, through_encoder, direct = (embedding_loss_gradients(tiny(variant="encdec", detach=d), tokens())
                                     for d in ("none", "embedding", "encoder_out"))
    for name in ("wpe.weight", "wte.weight", "blocks.0.attn.qkv_proj.weight"):
        torch.testing.assert_close(both[name], through_encoder[name] + direct[name], rtol=1e-4, atol=1e-6)
    assert through_encoder["wpe.weight"].abs().max() > 1e-5 and direct["wpe.weight"].abs().max() > 1e-5


def test_no_embedding_loss_means_no_such_term():
    model = tiny(variant="encdec", embedding_loss="none")
    idx = tokens()
    assert not hasattr(model, "ln_embed") and not hasattr(model, "ln_encoder_out")
    model.train()
    _, loss_train, terms = model(idx, idx)
    assert terms["embedding"] is None
    model.eval()
    assert torch.equal(loss_train, model(idx, idx)[1])


def test_embedding_loss_layernorm_shortcut_and_the_option_that_rules_it_out():
    """Gains of zero with equal biases make the embedding loss exactly zero whatever the embeddings are;
    with embedding_ln_affine=False the LayerNorms have nothing to learn and the loss stays positive."""
    idx = torch.randint(0, 50, (2, 16))
    model = tiny_model(variant="encdec", embedding_loss="mse")
    with torch.no_grad():
        for ln in (model.ln_embed, model.ln_encoder_out):
            ln.weight.zero_()
            ln.bias.fill_(0.3)
    _, _, terms = model(idx, idx)
    assert terms["embedding"].item() == 0.0
    fixed = tiny_model(variant="encdec", embedding_loss="mse", embedding_ln_affine=False)
    assert not list(fixed.ln_embed.parameters()) and not list(fixed.ln_encoder_out.parameters())
    assert sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in fixed.parameters()) == 4 * 16
    _, _, terms = fixed(idx, idx)
    assert terms["embedding"].item() > 0.1


@pytest.mark.parametrize("flags, layer_norms", [
    (dict(variant="encdec"), ["ln_embed", "ln_encoder_out"]),
    (dict(variant="parallel", embedding_ln="none"), ["ln_encoder_out"]),
    (dict(variant="encdec", encoder_out_ln=False), ["ln_embed"]),
    (dict(variant="encdec", embedding_ln_affine=False), []),  # no gains nor biases
    (dict(variant="encdec", embedding_loss="none"), []), (dict(variant="baseline"), []),
])
def test_embedding_norms_are_the_norms_of_the_embedding_loss_layernorm_gains_and_biases(flags, layer_norms):
    model = tiny(**flags)  # tiny moves every LayerNorm away from gain 1, bias 0
    expected = {}
    for name in layer_norms:
        ln = getattr(model, name)
        expected[f"{name}_gain_norm"] = pytest.approx(ln.weight.pow(2).sum().sqrt().item())
        expected[f"{name}_bias_norm"] = pytest.approx(ln.bias.pow(2).sum().sqrt().item())
    assert model.embedding_norms() == expected


# --- 5. each loss formula against a direct computation ---

@pytest.mark.parametrize("loss, embedding_ln, encoder_out_ln", list(itertools.product(
    ("mse", "cosine", "log_cosine"), ("none", "init", "avg_cum_sum"), (True, False))))
def test_embedding_loss_equals_the_write_up_formula(loss, embedding_ln, encoder_out_ln):
    model = tiny(variant="encdec", embedding_loss=loss, embedding_ln=embedding_ln, encoder_out_ln=encoder_out_ln).eval()
    idx = tokens()
    E, encoder_out = capture_E_and_encoder_out(model, idx)
    torch.testing.assert_close(E, model.wte(idx) + model.wpe(torch.arange(12)))

    def ln(x, module):
        return F.layer_norm(x, (16,), module.weight, module.bias)

    E_ln = ln(E, model.ln_embed) if embedding_ln == "init" else E
    E_avg_sum = torch.stack([E_ln[:, :i + 1].sum(dim=1) / (i + 1) for i in range(12)], dim=1)
    if embedding_ln == "avg_cum_sum":
        E_avg_sum = ln(E_avg_sum, model.ln_embed)
    out_enc_ln = ln(encoder_out, model.ln_encoder_out) if encoder_out_ln else encoder_out
    if loss == "mse":
        expected = F.mse_loss(out_enc_ln, E_avg_sum)
    else:
        cos = (out_enc_ln * E_avg_sum).sum(-1) / (out_enc_ln.norm(dim=-1) * E_avg_sum.norm(dim=-1))
        expected = (1 - (cos + 1) / 2).mean() if loss == "cosine" else (-torch.log((cos + 1) / 2)).mean()
    _, _, terms = model(idx, idx)
    assert terms["embedding"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_training_loss_is_cross_entropy_plus_coeff_times_embedding_loss():
    model = tiny(variant="encdec", embedding_loss_coeff=3.5).train()
    idx, targets = tokens(), tokens(seed=2)
    targets[:, :4] = -1  # ignored positions
    logits, loss, terms = model(idx, targets)
    ce = F.cross_entropy(logits.reshape(-1, 37)[targets.view(-1) >= 0], targets.view(-1)[targets.view(-1) >= 0])
    assert terms["ce"].item() == pytest.approx(ce.item(), rel=1e-5)
    assert loss.item() == pytest.approx(terms["ce"].item() + 3.5 * terms["embedding"].item(), rel=1e-5)
    assert not terms["ce"].requires_grad and not terms["embedding"].requires_grad  # detached: for the logs
    model.eval()
    assert model(idx, targets)[1].item() == pytest.approx(ce.item(), rel=1e-5)  # evaluation reports cross-entropy


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("variant", ["baseline", "encdec"])
def test_sub_pos_embed_subtracts_the_next_positions_before_the_output_layer(variant, rotary):
    model = tiny(variant=variant, sub_pos_embed="yes", rotary=rotary).eval()
    assert model.wpe.weight.size(0) == TINY["context_size"] + 1
    seen = {}
    model.ln_f.register_forward_hook(lambda m, i, out: seen.setdefault("h", out))
    idx = tokens()
    logits, _, _ = model(idx, idx)
    expected = (seen["h"] - model.wpe.weight[1:13]) @ model.wte.weight.T
    torch.testing.assert_close(logits, expected)


# --- wiring of the two encoder-decoders ---

def record_inputs(model):
    calls = []
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda m, args, out, i=i: calls.append(("encoder", i, out)))
    for i, block in enumerate(model.decoder_blocks):
        block.register_forward_hook(lambda m, args, out, i=i: calls.append(("decoder", i, args[1])))
    model(tokens())
    return calls


def test_encdec_decoder_reads_the_final_encoder_output_everywhere():
    calls = record_inputs(tiny(variant="encdec", n_encoder_layer=3, n_decoder_layer=2))
    assert [c[:2] for c in calls] == [("encoder", 0), ("encoder", 1), ("encoder", 2), ("decoder", 0), ("decoder", 1)]
    assert all(c[2] is calls[2][2] for c in calls[3:])


def test_parallel_layer_cross_attends_to_the_same_layers_encoder_output():
    calls = record_inputs(tiny(variant="parallel", n_encoder_layer=3, n_decoder_layer=2))
    assert [c[:2] for c in calls] == [("encoder", 0), ("encoder", 1), ("decoder", 0), ("encoder", 2), ("decoder", 1)]
    assert calls[2][2] is calls[1][2] and calls[4][2] is calls[3][2]


@pytest.mark.parametrize("order, expected",
                         [("self_first", ["attn", "cross_attn"]), ("cross_first", ["cross_attn", "attn"])])
def test_decoder_order_sets_which_attention_runs_first(order, expected):
    model = tiny(variant="encdec", decoder_order=order, n_decoder_layer=1)
    calls = []
    block = model.decoder_blocks[0]
    block.attn.register_forward_hook(lambda *a: calls.append("attn"))
    block.cross_attn.register_forward_hook(lambda *a: calls.append("cross_attn"))
    model(tokens())
    assert calls == expected


def test_cross_attention_uses_twice_the_heads_by_default():
    model = tiny(variant="encdec")
    assert model.decoder_blocks[0].cross_attn.n_head == 2 * TINY["n_head"]


def test_optimizer_decays_matrices_only_and_covers_every_parameter_once():
    model = tiny(variant="encdec")
    decay, no_decay = model.configure_optimizer(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = [id(p) for p in decay["params"] + no_decay["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))


# --- flags are validated in one place, with errors that name the flag ---

@pytest.mark.parametrize("flags, named", [
    (dict(variant="gpt"), "variant"),
    (dict(n_head=3), "n_head"),
    (dict(variant="encdec", cross_n_head=3), "cross_n_head"),
    (dict(variant="encdec", embedding_loss="l1"), "embedding_loss"),
    (dict(variant="encdec", embedding_ln="final"), "embedding_ln"),
    (dict(variant="encdec", detach="all"), "detach"),
    (dict(variant="encdec", sub_pos_embed="true"), "sub_pos_embed"),
    (dict(variant="encdec", decoder_order="random"), "decoder_order"),
    (dict(variant="baseline", embedding_loss="mse"), "embedding_loss"),
    (dict(variant="baseline", cross_n_head=4), "cross_n_head"),
    (dict(variant="baseline", n_encoder_layer=1), "n_encoder_layer"),
    (dict(variant="encdec", embedding_loss="none", detach="encoder_out"), "detach"),
    (dict(variant="encdec", embedding_loss="none", embedding_loss_coeff=2.0), "embedding_loss_coeff"),
    (dict(variant="encdec", embedding_loss_coeff=-1.0), "embedding_loss_coeff"),
    (dict(variant="parallel", n_encoder_layer=1, n_decoder_layer=2), "n_decoder_layer"),
    (dict(dropout=1.5), "dropout"),
])
def test_bad_flags_raise_value_error_naming_the_flag(flags, named):
    with pytest.raises(ValueError, match=rf"^{named}="):
        ModelConfig(**{**TINY, **flags})


@pytest.mark.parametrize("variant, flag", [
    ("encdec", "variant"), ("baseline", "variant"), ("encdec", "sub_pos_embed"), ("baseline", "sub_pos_embed"),
    ("encdec", "embedding_loss"), ("encdec", "embedding_ln"), ("encdec", "decoder_order"),
])
def test_building_with_a_value_that_no_branch_handles_raises_naming_the_flag(variant, flag):
    config = ModelConfig(**TINY, variant=variant)
    setattr(config, flag, "bogus")  # after check_flags, which would have refused it
    with pytest.raises(ValueError, match=rf"^{flag}='bogus' is not allowed: use one of "):
        build_model(config)


@pytest.mark.parametrize("variant, flag", [
    ("encdec", "variant"), ("baseline", "variant"), ("encdec", "sub_pos_embed"), ("baseline", "sub_pos_embed"),
    ("encdec", "embedding_loss"), ("baseline", "embedding_loss"), ("parallel", "embedding_ln"),
    ("encdec", "detach"),
])
def test_a_forward_pass_with_a_value_that_no_branch_handles_raises_naming_the_flag(variant, flag):
    model = tiny(variant=variant)
    setattr(model.config, flag, "bogus")  # a valid model, its config changed afterwards: not another variant
    with pytest.raises(ValueError, match=rf"^{flag}='bogus' is not allowed: use one of "):
        model(tokens(), tokens())


def test_defaults_are_the_write_ups_best_configuration():
    c = ModelConfig()
    assert (c.variant, c.n_embed, c.n_head, c.n_layer, c.context_size, c.cross_n_head) == (
        "encdec", 150, 5, 13, 200, 10)
    assert (c.embedding_loss, c.embedding_loss_coeff, c.embedding_ln, c.encoder_out_ln, c.detach) == (
        "mse", 8.0, "init", True, "encoder_out")
    assert (c.sub_pos_embed, c.add_pos_embed_to_decoder, c.decoder_order) == ("yes", False, "self_first")
    b = ModelConfig(variant="baseline")
    assert (b.embedding_loss, b.sub_pos_embed, b.cross_n_head) == ("none", "no", None)


def test_every_config_field_has_a_one_line_meaning_that_names_its_real_default():
    # train.py --help prints the comment beside each field; a field written None names the value it stands for
    comments = dict(re.findall(r"^    (\w+):[^#]*=[^#]*#\s*(.+)$", inspect.getsource(ModelConfig), re.M))
    assert list(comments) == ModelConfig.flags()
    stands_for = {"n_encoder_layer": "n_layer", "n_decoder_layer": "n_layer", "cross_n_head": "2 x n_head"}
    written = {**ENCODER_DECODER_DEFAULTS, **EMBEDDING_LOSS_DEFAULTS, "embedding_loss": "mse", "sub_pos_embed": "yes"}
    for flag, default in written.items():
        assert getattr(ModelConfig, flag) is None
        assert f"None: {stands_for.get(flag, default)}" in comments[flag]
    c = ModelConfig(n_layer=3, n_head=2, n_embed=8)
    assert (c.n_encoder_layer, c.n_decoder_layer, c.cross_n_head) == (3, 3, 4)


# --- the fast loss path ---

@pytest.mark.parametrize("variant, n_embed", [("baseline", 16), ("encdec", 16), ("encdec", 12)])
def test_loss_without_logits_equals_the_logits_path_in_value_and_gradient(variant, n_embed):
    model = tiny(variant=variant, n_embed=n_embed).train()  # 12: the loss pads the width to 16 internally
    idx, targets = tokens(B=12), tokens(B=12, seed=3)  # 144 rows: more than one chunk of 128
    targets[:, :5] = -1
    with_logits = gradients_of(model, idx, targets, return_logits=True)
    without = gradients_of(model, idx, targets, return_logits=False)
    assert without["logits"] is None and with_logits["logits"].shape == (12, 12, 37)
    assert without["loss"] == pytest.approx(with_logits["loss"], rel=1e-6)
    for name, g in with_logits["grads"].items():
        torch.testing.assert_close(without["grads"][name], g, rtol=1e-4, atol=1e-7)


def test_the_loss_skips_the_logits_on_a_cpu_with_a_large_vocabulary_and_wherever_they_would_be_large():
    assert not logits_needed(ModelConfig(vocab_size=50257), "cpu")
    assert logits_needed(ModelConfig(vocab_size=256), "cpu")
    assert logits_needed(ModelConfig(vocab_size=50257), "cuda", 4 * 200)  # 40M float32 logits: 160 MB
    assert not logits_needed(ModelConfig(vocab_size=50257), "cuda", 50 * 200)  # the write-up's micro-batch: 2 GB


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_loss_without_logits_equals_cross_entropy_under_autocast(dtype):
    """The GPU's path on the CPU: the output layer's matmuls in dtype, the softmax in float32, as autocast does it."""
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(300, 24, generator=g), torch.randn(50, 24, generator=g) * 0.3  # 300 rows: 3 chunks
    targets = torch.randint(0, 50, (300,), generator=g).masked_fill(torch.arange(300) % 7 == 0, -1)
    results = []
    for loss_of in (lambda x, w: F.cross_entropy(x @ w.T, targets, ignore_index=-1),
                    lambda x, w: LinearCrossEntropy.apply(x, w, targets, True)):
        x_, w_ = x.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cpu", dtype=dtype):
            loss = loss_of(x_, w_)
        loss.backward()
        results.append((loss.float(), x_.grad, w_.grad))
    for expected, got in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 5, 64, 1000])
def test_row_cross_entropy_is_each_rows_cross_entropy_whatever_rows_are_taken_at_a_time(rows):
    g = torch.Generator().manual_seed(0)
    h, weight = 3 * torch.randn(200, 24, generator=g), torch.randn(300, 24, generator=g)
    targets = torch.randint(300, (200,), generator=g)
    losses = row_cross_entropy(h, weight, targets, rows)
    assert losses.shape == (200,) and losses.dtype == torch.float32
    torch.testing.assert_close(losses, F.cross_entropy(h @ weight.T, targets, reduction="none"), rtol=1e-5, atol=1e-5)


def test_row_cross_entropy_averages_to_the_training_loss_without_logits():
    model = tiny(variant="encdec", embedding_loss="none", sub_pos_embed="no", n_embed=12)  # width padded inside
    idx, targets = tokens(B=12), tokens(B=12, seed=3)
    x = model.hidden_states(idx)[0].flatten(0, 1)
    loss = LinearCrossEntropy.apply(x, model.lm_head.weight, targets.flatten(), False)
    assert row_cross_entropy(x, model.lm_head.weight, targets.flatten()).mean().item() == pytest.approx(loss.item())


def test_flops_per_token_are_6_per_parameter_and_12_per_attention_width_and_key():
    for variant, attention_modules in (("baseline", 2), ("encdec", 2 + 2 * 2)):
        model = tiny(variant=variant)
        params = sum(p.numel() for n, p in model.named_parameters() if n != "wpe.weight")  # the table: no matmul
        assert model.flops_per_token(10) == 6 * params + 12 * attention_modules * TINY["n_embed"] * 10


def test_the_compiled_cumulative_average_is_the_cumulative_sum_over_the_position(monkeypatch):
    E = torch.randn(2, 7, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.stack([E[:, :i + 1].mean(dim=1) for i in range(7)], dim=1)
    for compiling in (False, True):  # compiled: a matmul with the causal averaging weights, not a cumulative sum
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
        torch.testing.assert_close(cumulative_average(E), expected)


def test_the_write_ups_odd_head_sizes_compile_to_the_eager_loss_and_gradients():
    """torch.compile (inductor, here its CPU backend) of one training step under bfloat16 autocast, with every odd part:
    heads of 15 (the write-up's cross-attention), rotary positions that leave a column, the embedding loss, and the
    loss without logits; its loss and gradients equal the eager ones to bfloat16 rounding (each gradient as a whole: a
    few of its elements, near 0, differ more)."""
    torch._dynamo.reset()
    model = tiny(n_embed=30, n_head=2, cross_n_head=2, rotary=True, n_layer=1).train()
    idx, targets = tokens(B=2), tokens(B=2, seed=3)
    runs = []
    for forward in (model, torch.compile(model)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            runs.append(gradients_of(model, idx, targets, return_logits=False, forward=forward))
    assert runs[1]["loss"] == pytest.approx(runs[0]["loss"], rel=1e-2)
    for name, g in runs[0]["grads"].items():
        assert (runs[1]["grads"][name] - g).norm() <= 0.05 * g.norm(), name


def gradients_of(model, idx, targets, return_logits, forward=None):
    model.zero_grad()
    logits, loss, _ = (model if forward is None else forward)(idx, targets, return_logits=return_logits)
    loss.backward()
    return dict(logits=logits, loss=loss.item(), grads={n: p.grad.clone() for n, p in model.named_parameters()})


@pytest.mark.parametrize("head_size", [15, 6, 16])
@pytest.mark.parametrize("T, L", [(9, 9), (1, 9)])  # the window, or a KV cache's one new query
def test_attention_padded_to_a_multiple_of_8_equals_plain_attention(head_size, T, L):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, head_size, generator=g) for n in (T, L, L))
    scores = q @ k.transpose(-2, -1) / head_size ** 0.5
    visible = torch.ones(T, L, dtype=torch.bool).tril(L - T)  # query i is position L - T + i
    expected = scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v
    y = causal_attention(q, k, v, 0.0)
    assert y.shape == (2, 3, T, head_size)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)


# --- the attention weights, kept on request ---

ATTENTION_FLAGS = [dict(variant="baseline"), dict(variant="encdec"), dict(variant="parallel", n_encoder_layer=3,
                   n_decoder_layer=2), dict(variant="encdec", rotary=True, decoder_order="cross_first", n_embed=20)]


def attention_families(model):
    """Every Attention module of the model, by family, layer by layer."""
    if model.config.variant == "baseline":
        return {"self": [block.attn for block in model.blocks]}
    return {"encoder self": [block.attn for block in model.blocks],
            "decoder self": [block.attn for block in model.decoder_blocks],
            "decoder cross": [block.cross_attn for block in model.decoder_blocks]}


def queries_keys_values(module, x, pos, context=None):
    """An Attention module's queries, keys and values (B, nh, T, hs) of its inputs, from its own projections."""
    B, T, C = x.shape
    if module.cross:
        (k, v), q = module.kv_proj(context).split(C, dim=-1), module.q_proj(x)
    else:
        q, k, v = module.qkv_proj(x).split(C, dim=-1)
    q, k, v = (t.view(B, T, module.n_head, -1).transpose(1, 2) for t in (q, k, v))
    return (rotate(q, pos), rotate(k, pos), v) if module.rotary else (q, k, v)


def causal_softmax(scores):
    T = scores.size(-1)
    return (scores + torch.full((T, T), float("-inf")).triu(1)).softmax(dim=-1)


@pytest.mark.parametrize("flags", ATTENTION_FLAGS, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_kept_attention_weights_are_the_causal_softmax_of_the_scaled_query_key_products(flags):
    model = tiny(**flags).eval()
    families, inputs = attention_families(model), {}
    for modules in families.values():
        for module in modules:  # what each module was given
            module.register_forward_pre_hook(lambda m, args: inputs.setdefault(m, args))
    model.keep_attention_weights()
    model(tokens())
    for family, modules in families.items():
        assert modules, family
        for module in modules:
            q, k, _ = queries_keys_values(module, *inputs[module])
            weights = module.weights
            assert weights.shape == (3, module.n_head, 12, 12)
            # softmax(Q K^T / sqrt(d) + M), M = -inf above the diagonal
            torch.testing.assert_close(weights, causal_softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5))
            torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3, module.n_head, 12))
            assert not weights.triu(1).any()  # no weight on a later position


@pytest.mark.parametrize("flags", ATTENTION_FLAGS, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_keeping_the_attention_weights_changes_no_logit_nor_generated_token(flags):
    model = tiny(**flags).eval()
    idx = tokens()
    fused, prompt = model(idx, idx)[0], idx[:, :4]
    generated = model.generate(prompt, 10, top_k=1)  # with the KV cache, past the context
    model.keep_attention_weights()
    assert torch.allclose(model(idx, idx)[0], fused, atol=1e-6, rtol=0)
    assert all(m.weights.shape[-2:] == (12, 12) for m in model.modules() if isinstance(m, Attention))
    assert torch.equal(model.generate(prompt, 10, top_k=1), generated)
    model.keep_attention_weights(False)
    assert not any(m.keep_weights for m in model.modules() if isinstance(m, Attention))


@pytest.mark.parametrize("variant", ["encdec", "parallel"])
def test_without_its_causal_mask_the_cross_attention_lets_a_position_read_its_target(variant):
    # the encoder output at t + 1 has read token t + 1, which is the target at position t
    model = tiny(variant=variant).eval()

    def unmasked(module, args, output):
        q, k, v = queries_keys_values(module, *args)
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5

        def attend(weights):  # heads side by side, then the output projection
            return module.out_proj((weights @ v).transpose(1, 2).reshape(output.shape))
        torch.testing.assert_close(attend(causal_softmax(scores)), output)  # with the mask: the module's own output
        return attend(scores.softmax(dim=-1))

    idx = tokens()
    changed = idx.clone()
    changed[:, 6] = (changed[:, 6] + 1) % TINY["vocab_size"]
    masked, masked_changed = model(idx, idx)[0], model(changed, changed)[0]
    assert torch.equal(masked[:, :6], masked_changed[:, :6])  # with the mask, no position before 6 sees token 6
    for block in model.decoder_blocks:
        block.cross_attn.register_forward_hook(unmasked)
    logits, logits_changed = model(idx, idx)[0], model(changed, changed)[0]
    assert not torch.allclose(logits[:, 5], logits_changed[:, 5])  # position 5 saw token 6, its target


# --- rotary positions ---

def test_rotary_query_key_products_depend_only_on_the_distance():
    # head size 7: its last column is not turned
    q, k = torch.randn(2, 3, 1, 7, generator=torch.Generator().manual_seed(0)).unbind(0)
    def product(p, m):
        return (rotate(q, torch.tensor([p])) * rotate(k, torch.tensor([m]))).sum(-1)
    torch.testing.assert_close(product(5, 2), product(105, 102))  # distance 3 at any offset
    torch.testing.assert_close(product(0, 0), (q * k).sum(-1))  # position 0 turns nothing
    assert not torch.allclose(product(5, 2), product(5, 1))  # another distance, another product
    turned = rotate(q, torch.tensor([9]))
    torch.testing.assert_close(turned.norm(dim=-1), q.norm(dim=-1))  # a rotation: lengths stay
    assert torch.equal(turned[..., 6], q[..., 6])


@pytest.mark.parametrize("variant", ["baseline", "encdec", "parallel"])
def test_rotary_positions_leave_E_without_a_position_and_the_parameter_count_as_it_was(variant):
    flags = dict(variant=variant, sub_pos_embed="no", **({} if variant == "baseline" else dict(embedding_loss="none")))
    learned, rotary = tiny(**flags), tiny(**flags, rotary=True)
    assert rotary.wpe is None and "wpe.weight" not in rotary.state_dict()  # no table to learn
    assert rotary.num_params() == learned.num_params()  # the write-ups' count leaves positions out either way
    idx = tokens()
    seen = {}
    rotary.drop.register_forward_hook(lambda m, i, out: seen.setdefault("E", out))
    rotary(idx, idx)
    torch.testing.assert_close(seen["E"], rotary.wte(idx))
    with_table = tiny(**{**flags, "sub_pos_embed": "yes"}, rotary=True)  # a table used only to be subtracted
    assert with_table.wpe.weight.size(0) == TINY["context_size"] + 1


def test_a_rotary_model_differs_from_the_learned_table_model_only_in_its_positions():
    # the same weights (the learned table zeroed): rotary positions change the output, and only through attention
    learned, rotary = tiny(variant="encdec"), tiny(variant="encdec", rotary=True)
    with torch.no_grad():
        learned.wpe.weight[0].zero_()  # position 0 is where a rotation is the identity
    rotary.load_state_dict(learned.state_dict())
    idx = tokens()
    a, b = learned.eval()(idx[:, :1], idx[:, :1])[0], rotary.eval()(idx[:, :1], idx[:, :1])[0]
    torch.testing.assert_close(a, b)  # one token at position 0: the same model
    assert not torch.allclose(learned(idx, idx)[0], rotary(idx, idx)[0])
