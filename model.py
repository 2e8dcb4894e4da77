"""The model of "Auto-regressive Encoder-Decoder Transformer" (Yan, 2024), ModelConfig.variant:
baseline (decoder-only GPT), encdec (the write-up's: a causal encoder, a decoder cross-attending to
its output), parallel (encoder and decoder blocks side by side: the draft, "Parallel Encoder-Decoder
Transformer"). Top to bottom: the config, attention, the blocks, the embedding losses, the model,
get_lr; then the KV cache, the details for speed only, the checks of the flags."""
import math
from dataclasses import dataclass, fields
from typing import Optional

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class ModelConfig:
    variant: str = "encdec"  # baseline (GPT) | encdec (the write-up's) | parallel (its draft's)
    vocab_size: int = 50257  # tokens in the vocabulary: GPT-2's (train.py: the dataset's)
    context_size: int = 200  # the most tokens read at once: positions 0 .. context_size - 1
    n_embed: int = 150  # C, the width of the embeddings and of every layer's input and output
    n_layer: int = 13  # layers; per side for the encoder-decoders, as in the write-ups
    n_head: int = 5  # heads of every self-attention
    dropout: float = 0.0  # dropout probability on E, the attention weights, every residual branch
    bias: bool = False  # biases in Linear layers and LayerNorms (LayerNorm_a and _b: always)
    rotary: bool = False  # rotary positions (RoPE) in every attention, not a table added to E
    # Encoder-decoder flags; None: the write-up's best (for the baseline: no loss, no pos sub)
    n_encoder_layer: Optional[int] = None  # layers of the encoder; None: n_layer
    n_decoder_layer: Optional[int] = None  # layers of the decoder; None: n_layer
    cross_n_head: Optional[int] = None  # heads of the cross-attention; None: 2 x n_head
    embedding_loss: Optional[str] = None  # none | mse | cosine | log_cosine; None: mse
    embedding_loss_coeff: Optional[float] = None  # loss = CE + coeff x embedding loss; None: 8.0
    embedding_ln: Optional[str] = None  # none | init | avg_cum_sum: LayerNorm_a's place; None: init
    encoder_out_ln: Optional[bool] = None  # LayerNorm_b on the encoder output; None: True
    detach: Optional[str] = None  # none | embedding | encoder_out: no gradient; None: encoder_out
    embedding_ln_affine: Optional[bool] = None  # gains and biases in LayerNorm_a and _b; None: True
    sub_pos_embed: Optional[str] = None  # no | yes | yes_ln: pos sub, subtract wpe[t+1]; None: yes
    add_pos_embed_to_decoder: Optional[bool] = None  # adds wpe[t+1] to decoder input; None: False
    decoder_order: Optional[str] = None  # self_first | cross_first; None: self_first

    def __post_init__(self):
        check_flags(self)  # fills in the defaults; at the end of this file

    @classmethod
    def flags(cls):
        return [f.name for f in fields(cls)]


def rotate(x, pos):
    """Rotary positions (RoPE, Su et al. 2021) of queries or keys x (B, nh, T, hs) at pos (T,): a
    query-key product depends only on their distance; an odd head size keeps its last column."""
    d = x.size(-1) // 2 * 2
    # theta_i = 10000^(-2i/d), i = 0 .. d/2 - 1
    theta = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angle = pos[:, None].float() * theta  # (T, d/2)
    cos = angle.cos().to(x.dtype)
    sin = angle.sin().to(x.dtype)
    x1 = x[..., :d // 2]
    x2 = x[..., d // 2:d]
    # (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)
    turned = [x1 * cos - x2 * sin, x1 * sin + x2 * cos]
    if d < x.size(-1):  # an odd head size: its last column as it was
        turned.append(x[..., d:])
    return torch.cat(turned, dim=-1)


class Attention(nn.Module):
    """Causal multi-head attention: self, or cross (keys and values from `context`, encoder_out)."""

    def __init__(self, config, n_head, cross=False):
        super().__init__()
        C = config.n_embed
        self.n_head = n_head
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(C, C, bias=config.bias)
            self.kv_proj = nn.Linear(C, 2 * C, bias=config.bias)
        else:
            self.qkv_proj = nn.Linear(C, 3 * C, bias=config.bias)  # fused q, k, v
        self.out_proj = nn.Linear(C, C, bias=config.bias)
        self.out_proj.residual = True  # it adds to the residual stream: a smaller init
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.rotary = config.rotary
        self.context_size = config.context_size  # a KV cache's room
        self.keep_weights = False  # see Transformer.keep_attention_weights
        self.weights = None

    def forward(self, x, pos, context=None, cache=None):
        B, T, C = x.size()
        nh = self.n_head
        hs = C // nh
        if self.cross:
            q = self.q_proj(x)
            kv = self.kv_proj(context)
        else:
            q, kv = self.qkv_proj(x).split([C, 2 * C], dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        kv = kv.view(B, T, 2, nh, hs).permute(2, 0, 3, 1, 4)  # (2, B, nh, T, hs): keys, values
        if self.rotary:  # queries and keys turned by their positions (the encoder's: the same)
            q = rotate(q, pos)
            kv = torch.stack((rotate(kv[0], pos), kv[1]))
        if cache is not None:  # generation: earlier positions' too (the KV cache, after the model)
            kv = cached_keys_values(cache, self, kv)
        # The causal rule: query t reads the keys of positions <= t only. The cross-attention too:
        # the encoder output at t + 1 has read token t + 1, which is the target at t, so without the
        # mask the decoder could copy the answer. (A KV cache's new query: every key is earlier.)
        if self.keep_weights:  # written out, to keep the weights (B, nh, T, L); no dropout
            k, v = kv[..., :hs]  # without a KV cache's padding (see causal_attention)
            L = k.size(2)  # the queries are the last T of L positions
            mask = torch.ones(T, L, dtype=torch.bool, device=x.device).tril(L - T)
            # softmax(Q K^T / sqrt(hs) + M), M = 0 where the mask lets a query see a key, else -inf
            scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
            self.weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            y = self.weights @ v
        else:  # the same, fused: a faster kernel (causal_attention, after the model)
            y = causal_attention(q, kv[0], kv[1], self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_dropout(self.out_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embed, 4 * config.n_embed, bias=config.bias)
        self.out_proj = nn.Linear(4 * config.n_embed, config.n_embed, bias=config.bias)
        self.out_proj.residual = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.out_proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: the baseline's layers and the encoder's."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embed, bias=config.bias)
        self.attn = Attention(config, config.n_head)
        self.ln_2 = nn.LayerNorm(config.n_embed, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, pos, cache=None):
        x = x + self.attn(self.ln_1(x), pos, cache=cache)
        return x + self.mlp(self.ln_2(x))


class DecoderBlock(nn.Module):
    """Self-attention, cross-attention to the encoder output (decoder_order: which first), MLP."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embed, bias=config.bias)
        self.attn = Attention(config, config.n_head)
        self.ln_cross_q = nn.LayerNorm(config.n_embed, bias=config.bias)  # cross: decoder side
        self.ln_cross_kv = nn.LayerNorm(config.n_embed, bias=config.bias)  # its own encoder side
        self.cross_attn = Attention(config, config.cross_n_head, cross=True)
        self.ln_2 = nn.LayerNorm(config.n_embed, bias=config.bias)
        self.mlp = MLP(config)
        check_choices(config, "decoder_order")
        self.cross_first = config.decoder_order == "cross_first"

    def forward(self, x, encoder_out, pos, cache=None):
        def self_attend(x):
            return x + self.attn(self.ln_1(x), pos, cache=cache)

        def cross_attend(x):
            return x + self.cross_attn(self.ln_cross_q(x), pos, self.ln_cross_kv(encoder_out),
                                       cache=cache)

        x = self_attend(cross_attend(x)) if self.cross_first else cross_attend(self_attend(x))
        return x + self.mlp(self.ln_2(x))


# The embedding losses of out_enc_ln and E_avg_sum (embedding_dissimilarity), per position: (B, T)
EMBEDDING_LOSSES = {
    # MSE(out_enc_ln, E_avg_sum)
    "mse": lambda out, avg: (out - avg).pow(2).mean(dim=-1),
    # 1 - (cosine_similarity + 1) / 2
    "cosine": lambda out, avg: 1 - (F.cosine_similarity(out, avg, dim=-1) + 1) / 2,
    # -log((cosine_similarity + 1) / 2)
    "log_cosine": lambda out, avg: -torch.log((F.cosine_similarity(out, avg, dim=-1) + 1) / 2),
}


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = c = config
        check_choices(c, "variant", "sub_pos_embed", "embedding_loss")
        encdec = c.variant != "baseline"  # encdec and parallel: the same modules, wired apart
        # one row more for the next tokens' positions 1..T (subtracted / added); rotary: only then
        self.next_pos = c.sub_pos_embed != "no" or bool(c.add_pos_embed_to_decoder)
        self.wte = nn.Embedding(c.vocab_size, c.n_embed)
        self.wpe = (nn.Embedding(c.context_size + self.next_pos, c.n_embed)
                    if self.next_pos or not c.rotary else None)
        self.drop = nn.Dropout(c.dropout)
        n_enc = c.n_encoder_layer if encdec else c.n_layer  # the baseline's layers, or the encoder
        self.blocks = nn.ModuleList([Block(c) for _ in range(n_enc)])
        if encdec:
            self.decoder_in = nn.Linear(c.n_embed, c.n_embed, bias=c.bias)
            self.decoder_blocks = nn.ModuleList([DecoderBlock(c) for _ in range(c.n_decoder_layer)])
        self.ln_f = nn.LayerNorm(c.n_embed, bias=c.bias)
        if c.sub_pos_embed == "yes_ln":
            self.ln_sub_pos = nn.LayerNorm(c.n_embed, bias=c.bias)
        if c.embedding_loss != "none":
            # LayerNorm_a and _b: biases whatever `bias` says, as the write-ups count them. Gains of
            # 0, equal biases: this loss 0 whatever E is; embedding_ln_affine=False rules it out.
            check_choices(c, "embedding_ln")
            affine = c.embedding_ln_affine
            if c.embedding_ln != "none":
                self.ln_embed = nn.LayerNorm(c.n_embed, elementwise_affine=affine)
            if c.encoder_out_ln:
                self.ln_encoder_out = nn.LayerNorm(c.n_embed, elementwise_affine=affine)
        self.lm_head = nn.Linear(c.n_embed, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        # GPT-2 init: std 0.02, and 0.02 / sqrt(2 x n_layer) for the projections into the residual
        # stream (two per layer; n_layer counts an encoder-decoder's layers per side)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                std = 0.02 / math.sqrt(2 * c.n_layer) if hasattr(module, "residual") else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def num_params(self):
        """Parameters but the position table (as the write-ups count); the tied layer once."""
        positions = self.wpe.weight.numel() if self.wpe is not None else 0
        return sum(p.numel() for p in self.parameters()) - positions

    def hidden_states(self, idx, cache=None, start=0):
        """One forward pass per variant: the states before the output layer (B, T, C), E and the
        encoder output (baseline: None). cache: a KV cache ({} at first) from position `start`."""
        c = self.config
        T = idx.size(1)
        assert start + T <= c.context_size, f"{start + T} tokens: more than {c.context_size}"
        assert start == 0 or T == 1, "a KV cache takes the prompt, then one token at a time"
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        # E = token embedding + positional embedding (rotary positions: the token embedding alone)
        E = self.drop(self.wte(idx) if c.rotary else self.wte(idx) + self.wpe(pos))  # (B, T, C)
        # the next tokens' positions 1..T: subtracted before the output layer / added to the decoder
        next_pos_embed = self.wpe(pos + 1) if self.next_pos else None
        if c.variant == "baseline":
            x = E
            for block in self.blocks:
                x = block(x, pos, cache)
            encoder_out = None
        elif c.variant == "encdec":
            encoder_out = E
            for block in self.blocks:
                encoder_out = block(encoder_out, pos, cache)
            # the decoder starts from a linear layer on the encoder output
            x = self.decoder_in(encoder_out)
            if c.add_pos_embed_to_decoder:
                x = x + next_pos_embed
            for block in self.decoder_blocks:
                x = block(x, encoder_out, pos, cache)
        elif c.variant == "parallel":
            # layer i: an encoder block, and a decoder block that reads that layer's encoder output
            x = self.decoder_in(E)  # the decoder starts from a linear layer on E
            if c.add_pos_embed_to_decoder:
                x = x + next_pos_embed
            encoder_out = E
            # a shallower decoder: beside the last layers
            first_paired = len(self.blocks) - len(self.decoder_blocks)
            for i, block in enumerate(self.blocks):
                encoder_out = block(encoder_out, pos, cache)
                if i >= first_paired:
                    x = self.decoder_blocks[i - first_paired](x, encoder_out, pos, cache)
        else:
            raise flag_error(c, "variant")
        x = self.ln_f(x)
        if c.sub_pos_embed in ("yes", "yes_ln"):
            # subtract the positional embedding of the next token before the output layer
            x = x - next_pos_embed
            if c.sub_pos_embed == "yes_ln":
                x = self.ln_sub_pos(x)
        elif c.sub_pos_embed != "no":
            raise flag_error(c, "sub_pos_embed")
        return x, E, encoder_out

    def forward(self, idx, targets=None, return_logits=True):
        """(logits, loss, terms): the loss training minimises (eval: cross-entropy), its detached
        terms {"ce", "embedding"}; return_logits=False: no logits; no targets: last position's"""
        c = self.config
        x, E, encoder_out = self.hidden_states(idx)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None, None
        if return_logits:
            logits = self.lm_head(x)  # (B, T, vocab)
            # cross-entropy = the mean over targets t (not -1) of -log softmax(logits)[t]
            ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        else:  # the same without the float32 logits: less memory, faster on a CPU (logits_needed)
            logits = None
            ce = LinearCrossEntropy.apply(x.flatten(0, 1), self.lm_head.weight, targets.flatten(),
                                          torch.is_grad_enabled())
        loss = ce
        terms = {"ce": ce.detach(), "embedding": None}
        if c.embedding_loss != "none":  # an unknown one fails in embedding_dissimilarity
            embedding_loss = self.embedding_dissimilarity(E, encoder_out).mean()
            terms["embedding"] = embedding_loss.detach()
            if self.training:
                # loss = cross-entropy + coeff x embedding loss
                loss = ce + c.embedding_loss_coeff * embedding_loss
        return logits, loss, terms

    def embedding_dissimilarity(self, E, encoder_out):
        """The write-up's embedding loss before its mean over positions: (B, T)."""
        c = self.config
        check_choices(c, "embedding_loss", "detach", "embedding_ln")  # none: forward calls no loss
        if c.detach == "encoder_out":
            encoder_out = encoder_out.detach()  # only the embeddings learn from this loss
        elif c.detach == "embedding":
            E = E.detach()
        # E_ln = LayerNorm_a(E)
        if c.embedding_ln == "init":
            E = self.ln_embed(E)
        # E_avg_sum(i) = 1/i * sum_{k<=i} E_ln(k): the cumulative average over T
        embed_avg = cumulative_average(E)
        if c.embedding_ln == "avg_cum_sum":
            embed_avg = self.ln_embed(embed_avg)
        # out_enc_ln = LayerNorm_b(out_enc)
        if c.encoder_out_ln:
            encoder_out = self.ln_encoder_out(encoder_out)
        return EMBEDDING_LOSSES[c.embedding_loss](encoder_out, embed_avg)

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 stop_token=None, use_cache=True):
        """Append max_new_tokens tokens to idx (B, T), each drawn from the next token's logits given
        the last context_size tokens; top_k=1: the most likely; top_p: nucleus sampling; use_cache:
        the KV cache (after the model), the same tokens sooner."""
        ctx = self.config.context_size
        # the output layer as (C, vocab): a CPU's matrix-vector product runs ~4x faster so
        lm_head_t = self.lm_head.weight.T.contiguous()
        cache = None
        filled = 0  # positions in the cache
        done = torch.zeros(idx.size(0), 1, dtype=torch.bool, device=idx.device)  # drew stop_token
        for _ in range(max_new_tokens):
            if use_cache and 0 < filled < ctx:  # the newest token: the cache holds the others'
                x = self.hidden_states(idx[:, -1:], cache, start=filled)[0]
                filled += 1
            else:  # the whole window: the first step, no cache, or a window that slid (a new cache)
                cache = {} if use_cache else None
                x = self.hidden_states(idx[:, -ctx:], cache)[0]
                filled = min(idx.size(1), ctx)
            logits = x[:, -1, :] @ lm_head_t  # (B, vocab)
            # max 0: no overflow at any temperature
            logits = (logits - logits.amax(-1, keepdim=True)) / temperature
            if top_k not in (None, 1):
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            # top_p: drop each token whose more likely ones already add up to top_p; the most likely
            # stays, whatever top_p (one below float32's smallest number is 0 here)
            if top_p is not None and top_k != 1:
                p, order = F.softmax(logits, -1).sort(-1, descending=True)
                cut = p.cumsum(-1) - p >= top_p
                cut[:, 0] = False
                dropped = logits.gather(-1, order).masked_fill(cut, -math.inf)
                logits.scatter_(-1, order, dropped)
            # greedy (top_k=1): the most likely token, without drawing from 50k probabilities
            if top_k == 1:
                idx_next = logits.argmax(-1, keepdim=True)
            else:
                idx_next = torch.multinomial(F.softmax(logits, -1), 1)
            # a sequence that drew the stop token repeats it; once all have, stop
            if stop_token is not None:
                done |= idx_next == stop_token
                idx_next = idx_next.masked_fill(done, stop_token)
            idx = torch.cat((idx, idx_next), dim=1)
            if stop_token is not None and done.all():
                break
        return idx

    def keep_attention_weights(self, keep=True):
        """Every Attention keeps its weights (B, nh, T, L) from the next pass on, in
        .weights: blocks[i].attn, decoder_blocks[i].attn and decoder_blocks[i].cross_attn."""
        for module in self.modules():
            if isinstance(module, Attention):
                module.keep_weights = keep

    def embedding_norms(self):
        """The norms of LayerNorm_a's and _b's gains and biases, for the logs (see ln_embed)."""
        norms = {}
        for name in ("ln_embed", "ln_encoder_out"):
            ln = getattr(self, name, None)
            if ln is not None and ln.weight is not None:
                norms[f"{name}_gain_norm"] = ln.weight.norm().item()
                norms[f"{name}_bias_norm"] = ln.bias.norm().item()
        return norms

    def flops_per_token(self, T=None):
        """Training FLOPs (forward + backward) per token; MFU: these x tokens/s over peak FLOP/s."""
        T = T or self.config.context_size
        n_attention = len(self.blocks) + 2 * len(getattr(self, "decoder_blocks", []))
        # 6N: 2 per parameter forward (multiply, add), 4 backward; N: num_params, LayerNorms' few
        # counted as matmul weights. Attention: 12 per width and key (Q K^T, weights x V; 3 passes)
        return 6 * self.num_params() + 12 * n_attention * self.config.n_embed * T

    def configure_optimizer(self, weight_decay, learning_rate, betas, device_type):
        """AdamW; weight decay on matmul weights and embeddings, not on LayerNorms' parameters."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type == "cuda")


def get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters, decay_lr=True):
    """Iteration `it`'s learning rate: linear warmup, cosine decay to min_lr at lr_decay_iters."""
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def build_model(config):
    return Transformer(config)


def cached_keys_values(cache, attention, kv):
    """The KV cache: in generation, each step computes only the new token's keys and values.
    Attention is causal, so the keys and values of a position never change: the cache, a dict of
    each Attention's, keeps the earlier ones (past context_size every position shifts: generate
    starts a new cache). Writes kv (2, B, nh, T, hs) of T new positions into attention's buffer,
    (2, B, nh, context_size, hs padded to a multiple of 8) filled in place; returns those so far."""
    hs = kv.size(-1)
    if attention not in cache:
        cache[attention] = kv.new_zeros(*kv.shape[:3], attention.context_size, hs + -hs % 8), 0
    buffer, start = cache[attention]
    end = start + kv.size(3)
    buffer[..., start:end, :hs] = kv
    cache[attention] = buffer, end
    return buffer[..., :end, :]


# For speed only: the same numbers, sooner

def causal_attention(q, k, v, dropout_p):
    """Causal attention, fused; one query alone (a KV cache's step) sees every key."""
    hs = q.size(-1)
    # up to 1.6x slower on head sizes not a multiple of 8 (the write-up's cross-attention: 15): zero
    # columns change no dot product, give zero outputs (compiling: the compiler picks its kernel)
    width = k.size(-1) if torch.compiler.is_compiling() else k.size(-1) + -k.size(-1) % 8
    q, k, v = (F.pad(t, (0, width - t.size(-1))) if t.size(-1) < width else t for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=q.size(2) > 1,
                                       scale=1 / math.sqrt(hs))
    return y[..., :hs]


def cumulative_average(E):
    """E_avg_sum of E (B, T, C): E.cumsum(1) / i at position i. Compiled, a matmul with the (T, T)
    causal averaging weights: torch 2.11's compiler crashed on CUDA on the cumulative sum, 1/i."""
    i = torch.arange(1, E.size(1) + 1, device=E.device, dtype=E.dtype)[:, None]  # (T, 1)
    # in E's precision, as the cumulative sum: autocast would round the matmul to 16 bits
    if torch.compiler.is_compiling():
        with torch.autocast(E.device.type, enabled=False):
            return (torch.ones(E.size(1), E.size(1), device=E.device, dtype=E.dtype).tril() / i) @ E
    return E.cumsum(dim=1) / i


def softmax_chunks(x, weight, targets, rows):
    """For each `rows` rows of x (N, C): their start, exp(logits - m) (rows, vocab) in float32, m
    each row's largest logit, its row sums, each row's cross-entropy: never all logits at once."""
    for i in range(0, x.size(0), rows):
        logits = (x[i:i + rows] @ weight.T).float()  # (rows, vocab)
        target_logits = logits.gather(1, targets[i:i + rows, None])[:, 0]
        m = logits.amax(dim=1)
        p = logits.sub_(m[:, None]).exp_()  # in place: no second (rows, vocab) tensor
        total = p.sum(dim=1)
        # cross-entropy = m + log sum_j exp(logit_j - m) - logit_target
        yield i, p, total, m + total.log() - target_logits


def row_cross_entropy(x, weight, targets, rows=256):
    """The cross-entropy (N,) of each row of the logits x @ weight.T, x (N, C): evaluate.py's."""
    chunks = softmax_chunks(x.float(), weight.float(), targets, rows)
    return torch.cat([losses for *_, losses in chunks])


class LinearCrossEntropy(torch.autograd.Function):
    """F.cross_entropy(x @ weight.T, targets, ignore_index=-1) of x (N, C), never all logits."""

    @staticmethod
    def forward(ctx, x, weight, targets, grad_enabled):
        # the gradients taken on the way, by chunks of rows: on a CPU 128 (in its caches), else
        # 1 GiB of float32 logits; it compiles
        rows = 128 if x.device.type == "cpu" else max(128, 2 ** 28 // weight.size(0))
        valid = targets != -1
        n = valid.sum().clamp(min=1)
        C = x.size(1)
        w = weight.to(x.dtype)
        # eager CPU matmuls run ~8% faster on a width that is a multiple of 8
        if C % 8 and not torch.compiler.is_compiling():
            x = F.pad(x, (0, -C % 8))
            w = F.pad(w, (0, -C % 8))
        need_grad = grad_enabled and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
        loss = 0.0
        grad_x = []
        grad_weight = torch.zeros_like(w, dtype=torch.float32) if need_grad else None
        for i, p, total, losses in softmax_chunks(x, w, targets.clamp(min=0), rows):
            vc = valid[i:i + rows]
            loss = loss + (losses * vc).sum()
            if need_grad:
                # d loss / d logits = (softmax - one_hot(target)) / n, on the rows that count
                grad = p.mul_(vc[:, None] / (n * total[:, None]))
                tc = targets[i:i + rows].clamp(min=0)
                grad = grad.scatter_add_(1, tc[:, None], -(vc / n)[:, None]).to(x.dtype)
                grad_x.append(grad @ w)
                grad_weight.add_(grad.T @ x[i:i + rows])
        if need_grad:
            ctx.save_for_backward(torch.cat(grad_x)[:, :C], grad_weight[:, :C].to(weight.dtype))
        return loss / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_weight = ctx.saved_tensors
        return grad_x * grad_loss, grad_weight * grad_loss, None, None


def logits_needed(config, device_type, rows=None):
    """False: the loss from LinearCrossEntropy, never the logits: on a CPU, a large vocabulary (it
    pays at 50257, not 256); elsewhere, a micro-batch's rows (B x T) over 2^28 float32 logits."""
    if device_type == "cpu":
        return config.vocab_size < 8192
    return rows is None or rows * config.vocab_size <= 2 ** 28


# The flags' checks

# every value each dispatch on a flag has a branch for (the embedding losses: EMBEDDING_LOSSES)
CHOICES = dict(variant=("baseline", "encdec", "parallel"),
               embedding_loss=("none", *EMBEDDING_LOSSES),
               embedding_ln=("none", "init", "avg_cum_sum"),
               detach=("none", "embedding", "encoder_out"),
               sub_pos_embed=("no", "yes", "yes_ln"),
               decoder_order=("self_first", "cross_first"))


# The defaults ModelConfig's comments name: the write-up's best configuration
ENCODER_DECODER_DEFAULTS = dict(n_encoder_layer=lambda c: c.n_layer,
                                n_decoder_layer=lambda c: c.n_layer,
                                cross_n_head=lambda c: 2 * c.n_head,
                                add_pos_embed_to_decoder=False, decoder_order="self_first")
EMBEDDING_LOSS_DEFAULTS = dict(embedding_loss_coeff=8.0, embedding_ln="init", encoder_out_ln=True,
                               detach="encoder_out", embedding_ln_affine=True)


def flag_error(config, flag, fix=None):
    """The ValueError of a flag's value: one no branch handles, or (fix) one that breaks a rule."""
    fix = fix or "use one of " + ", ".join(CHOICES[flag])
    return ValueError(f"{flag}={getattr(config, flag)!r} is not allowed: {fix}")


def check_choices(config, *flags):
    for flag in flags:
        if getattr(config, flag) not in CHOICES[flag]:
            raise flag_error(config, flag)


def check_flags(c):
    """The one place the flags are checked (ValueError naming flag and fix); defaults set."""
    def fill(defaults, applies, where=None):  # where they do not apply, only None is allowed
        for flag, default in defaults.items():
            if getattr(c, flag) is not None and not applies:
                raise flag_error(c, flag, f"it applies only {where}")
            if getattr(c, flag) is None and applies:
                setattr(c, flag, default(c) if callable(default) else default)

    def positive(*flags):
        for flag in flags:
            if not isinstance(getattr(c, flag), int) or getattr(c, flag) < 1:
                raise flag_error(c, flag, "use a positive integer")

    positive("vocab_size", "context_size", "n_embed", "n_layer", "n_head")
    if c.n_embed % c.n_head:
        raise flag_error(c, "n_head", f"n_embed={c.n_embed} must be divisible by it")
    if not 0.0 <= c.dropout < 1.0:
        raise flag_error(c, "dropout", "use a value in [0, 1)")
    check_choices(c, "variant")
    encdec = c.variant != "baseline"
    if not encdec and c.embedding_loss not in (None, "none"):
        raise flag_error(c, "embedding_loss", "the baseline has no encoder; use variant=encdec")
    fill(ENCODER_DECODER_DEFAULTS, encdec, "to variant=encdec or variant=parallel")
    fill(dict(embedding_loss="mse" if encdec else "none", sub_pos_embed="yes" if encdec else "no"),
         True)
    check_choices(c, "embedding_loss", "sub_pos_embed")
    losses = ", ".join(EMBEDDING_LOSSES)
    fill(EMBEDDING_LOSS_DEFAULTS, c.embedding_loss != "none", f"with an embedding loss ({losses})")
    if c.embedding_loss != "none":
        check_choices(c, "embedding_ln", "detach")
        if not c.embedding_loss_coeff > 0:
            raise flag_error(c, "embedding_loss_coeff", "use a positive number")
    if encdec:
        check_choices(c, "decoder_order")
        positive("n_encoder_layer", "n_decoder_layer", "cross_n_head")
        if c.variant == "parallel" and c.n_decoder_layer > c.n_encoder_layer:
            raise flag_error(c, "n_decoder_layer", "the parallel decoder runs beside the last "
                             f"encoder layers, so use at most n_encoder_layer={c.n_encoder_layer}")
        if c.n_embed % c.cross_n_head:
            raise flag_error(c, "cross_n_head", f"n_embed={c.n_embed} must be divisible by it")
