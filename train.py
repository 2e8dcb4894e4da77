"""
Train the auto-regressive encoder-decoder transformer, or the decoder-only baseline it is compared with.

    python train.py --dataset=reversal                      # zero-setup demo: seed 002's sequence reversal
    python train.py config/paper_encdec_mse_pos_sub.py      # a seed 001 appendix run (prepare the data first)
    python train.py config/cpu_baseline.py --max_iters=100  # a config file, then --key=value overrides
    torchrun --standalone --nproc_per_node=8 train.py config/paper_baseline.py   # DDP

Batches (and dropout masks) are a function of (seed, iteration, micro-step), so a resumed run and a
DDP run log exactly the losses of one uninterrupted single-process run with the same global batch.
"""
import ast
import dataclasses
import difflib
import json
import math
import os
import sys
import time
import typing
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import reversal
from evaluate import token_losses, window_starts as token_windows
from model import ModelConfig, build_model

# -----------------------------------------------------------------------------
# training globals; the defaults are the seed 001 appendix runs (one A100, 9k steps)
out_dir = "out"
dataset = "wikipedia"  # data/<dataset>/{train,val}.bin and meta.json, or "reversal" (generated here)
batch_size = 50  # sequences per micro-batch
gradient_accumulation_steps = 16  # micro-batches per optimizer step, over all processes together
max_iters = 9000
learning_rate = 9e-4
decay_lr = True  # linear warmup, then cosine decay to min_lr; False: constant learning_rate
min_lr = 9e-5
warmup_iters = 300
lr_decay_iters = 700000  # far beyond max_iters, as in the seed: the cosine barely starts
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # clip the gradient norm to this; 0 disables
eval_interval = 500
eval_iters = 200  # batches per split at each evaluation; 0: every val token once (see evaluate.py)
log_interval = 10
init_from = "scratch"  # scratch | resume (from out_dir/ckpt.pt)
always_save_checkpoint = True  # False: save only when the val loss improves
seed = 1337
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
compile = False  # torch.compile the model
# every ModelConfig field is a global of the same name; None keeps the variant's default (see model.py)
globals().update(dict.fromkeys(ModelConfig.flags()))
# -----------------------------------------------------------------------------
# config: `python train.py [config/file.py ...] [--key=value ...]`, later ones win


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


defaults = {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))}
types = {k: type(v) for k, v in defaults.items()}
types.update({f.name: (typing.get_args(f.type) or (f.type,))[0] for f in dataclasses.fields(ModelConfig)})  # Optional[int] -> int
user_set = set()


def set_config(key, value, source, text=None):
    if key not in defaults:
        close = difflib.get_close_matches(key, defaults, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else "see the globals at the top of train.py"
        fail(f"unknown config key '{key}' in {source}; {hint}")
    want = types[key]
    if want is str and text is not None and not isinstance(value, str):
        value = text  # --out_dir=2024 means the string
    if want is float and type(value) is int:
        value = float(value)
    if not (type(value) is want or (value is None and defaults[key] is None)):
        fail(f"{key}={value!r} in {source} has the wrong type: {key} takes a {want.__name__}, not a {type(value).__name__}")
    globals()[key] = value
    user_set.add(key)


for arg in sys.argv[1:]:
    if arg.startswith("--"):
        key, has_value, text = arg[2:].partition("=")
        if not has_value:
            fail(f"'{arg}' has no value; write --{key}=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text  # a bare word: a string
        set_config(key, value, "the command line", text)
    else:
        if not os.path.isfile(arg):
            fail(f"config file '{arg}' not found; give a path like config/cpu_baseline.py, or options as --key=value")
        namespace = {}
        exec(open(arg).read(), namespace)  # config files are Python assignments, e.g. `n_layer = 4`
        for key, value in namespace.items():
            if not key.startswith("_") and not isinstance(value, type(sys)):
                set_config(key, value, arg)
if init_from not in ("scratch", "resume"):
    fail(f"init_from={init_from!r} is not allowed; use --init_from=scratch or --init_from=resume")
ckpt_path = os.path.join(out_dir, "ckpt.pt")
checkpoint = None
if init_from == "resume":  # the checkpoint's settings fill in every key not set here
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path} to resume from; train with --init_from=scratch first, or set --out_dir")
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu")
        saved_config = ModelConfig(**checkpoint["model_config"])
        restored = {k: v for k, v in checkpoint["train_config"].items() if k not in user_set | {"init_from", "device", "dtype", "compile"}}
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); restore a good copy or train from scratch in a new --out_dir")
    if dataset != checkpoint["train_config"]["dataset"] and "dataset" in user_set:
        fail(f"{ckpt_path} was trained on dataset '{checkpoint['train_config']['dataset']}', not '{dataset}'; drop --dataset to resume it")
    globals().update(restored)
    user_set |= restored.keys()
if dataset == "reversal":  # seed 002's toy task has its own, much shorter schedule
    schedule = {k: v for k, v in reversal.SCHEDULE.items() if k not in user_set}
    globals().update(schedule)
    if schedule:
        print("reversal: using its schedule for " + ", ".join(f"{k}={v}" for k, v in schedule.items()))
train_config = {k: globals()[k] for k in defaults}  # saved in checkpoints
# -----------------------------------------------------------------------------
# processes and devices

ddp = "RANK" in os.environ  # started by torchrun
if ddp:
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if device.startswith("cuda"):
        device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(device)
else:
    rank, world_size = 0, 1
master = rank == 0
if gradient_accumulation_steps % world_size:
    fail(f"gradient_accumulation_steps={gradient_accumulation_steps} must be divisible by the {world_size} processes; change one of them")
my_micro_steps = list(range(rank, gradient_accumulation_steps, world_size))  # rank r of W does micro-steps r, r+W, ...
device_type = "cuda" if device.startswith("cuda") else "cpu"
if device_type == "cuda" and not torch.cuda.is_available():
    fail(f"device={device!r} but CUDA is not available here; use --device=cpu")
if dtype not in ("float32", "bfloat16") or (dtype == "bfloat16" and device_type == "cpu"):
    fail(f"dtype={dtype!r} is not supported on {device_type}; use --dtype=float32" + (" (bfloat16 is for CUDA)" if device_type == "cpu" else " or bfloat16"))
ptdtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
autocast = torch.autocast(device_type, dtype=ptdtype) if dtype == "bfloat16" else nullcontext()
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
# -----------------------------------------------------------------------------
# data: get_batch(split, rng) -> (x, y) on the device

if dataset == "reversal":
    train_sequences, held_out = reversal.split()
    dataset_vocab, block = reversal.VOCAB_SIZE, reversal.BLOCK_SIZE
    if context_size < block:
        fail(f"context_size={context_size} is too short for reversal sequences of {block} tokens; leave context_size unset")

    def get_batch_cpu(split, rng):
        return reversal.get_batch(train_sequences if split == "train" else held_out, batch_size, rng)
else:
    data_dir = os.path.join("data", dataset)
    if not all(os.path.exists(os.path.join(data_dir, f)) for f in ("train.bin", "val.bin", "meta.json")):
        fail(f"dataset '{dataset}' not found in {data_dir}/: run `python prepare_wikipedia.py --name={dataset}` "
             f"(or with --input FILE --tokenizer=byte offline), or try --dataset=reversal, which needs no data")
    with open(os.path.join(data_dir, "meta.json")) as f:
        dataset_vocab = json.load(f)["vocab_size"]
    block = context_size or ModelConfig.context_size
    for split in ("train", "val"):
        n_tokens = os.path.getsize(os.path.join(data_dir, f"{split}.bin")) // 2
        if n_tokens <= block:
            fail(f"{data_dir}/{split}.bin has {n_tokens} tokens, too few for context_size={block}; "
                 f"prepare more text or lower --context_size")

    def get_batch_cpu(split, rng):
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")  # reopened: no memory growth
        ix = rng.integers(len(data) - block, size=batch_size)
        x = torch.from_numpy(np.stack([data[i:i + block] for i in ix]).astype(np.int64))
        y = torch.from_numpy(np.stack([data[i + 1:i + 1 + block] for i in ix]).astype(np.int64))
        return x, y


def get_batch(split, rng):
    x, y = get_batch_cpu(split, rng)
    if device_type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def batch_rng(it, micro_step):
    """Micro-batch `micro_step` of iteration `it` is the same whatever the process count and restarts."""
    return np.random.default_rng([seed, 0, it, micro_step])


def eval_rng(split, k):
    return np.random.default_rng([seed, 1 + ("train", "val").index(split), k, 0])  # the same batches at each eval


if vocab_size is None:
    vocab_size = dataset_vocab
elif vocab_size < dataset_vocab:
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {dataset_vocab} tokens; leave vocab_size unset")
# -----------------------------------------------------------------------------
# model, optimizer, checkpoint

try:
    config = ModelConfig(**{k: globals()[k] for k in ModelConfig.flags() if globals()[k] is not None})
except ValueError as e:
    fail(e)
iter_num, best_val_loss = 0, float("inf")
if checkpoint is not None:
    diffs = [(k, v, getattr(config, k)) for k, v in dataclasses.asdict(saved_config).items() if getattr(config, k) != v]
    if diffs:
        fail(f"{ckpt_path} was trained with {', '.join(f'{k}={v!r}' for k, v, _ in diffs)}, but this run asks for "
             f"{', '.join(f'{k}={new!r}' for k, _, new in diffs)}; drop those flags to resume"
             + (f" (vocab_size comes from data/{dataset}/meta.json: prepare it as for training)" if "vocab_size" in [d[0] for d in diffs] else ""))
    iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
start_iter = iter_num
torch.manual_seed(seed)  # the same initial weights in every process
raw_model = build_model(config).to(device)
optimizer = raw_model.configure_optimizer(weight_decay, learning_rate, (beta1, beta2), device_type)
if checkpoint is not None:
    raw_model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"]["cpu"].cpu())
    if device_type == "cuda" and checkpoint["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(checkpoint["rng"]["cuda"].cpu())
    checkpoint = None  # free the memory
# the (B, T, vocab) logits are not needed here; on a CPU, skipping them pays off for large vocabularies (measured: 50257, not 256)
return_logits = device_type == "cuda" or config.vocab_size < 8192
model = torch.compile(raw_model) if compile else raw_model
eval_model = model
if ddp:
    model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])] if device_type == "cuda" else None)


def save_checkpoint():
    checkpoint = {"model_config": dataclasses.asdict(config), "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                  "iter_num": iter_num,  # also the data position: batches are a function of (seed, iteration)
                  "best_val_loss": best_val_loss, "train_config": train_config,
                  "rng": {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if device_type == "cuda" else None}}
    tmp_path = ckpt_path + ".tmp"
    torch.save(checkpoint, tmp_path)
    os.replace(tmp_path, ckpt_path)  # atomic: a crash mid-save leaves the previous checkpoint whole


def get_lr(it):
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def embedding_norms():
    """The embedding loss's LayerNorm gains and biases: gains of zero with equal biases make the loss zero whatever E is."""
    norms = {}
    for name in ("ln_embed", "ln_encoder_out"):
        ln = getattr(raw_model, name, None)
        if ln is not None and ln.weight is not None:
            norms[f"{name}_gain_norm"], norms[f"{name}_bias_norm"] = ln.weight.norm().item(), ln.bias.norm().item()
    return norms


@torch.no_grad()
def evaluate():
    """Mean cross-entropy and embedding loss over eval_iters fixed batches per split, in eval mode (no dropout)."""
    eval_model.eval()
    out = {}
    if eval_iters == 0 and dataset != "reversal":  # every val token once, and as many train windows spread evenly
        val_tokens = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
        n_windows = len(token_windows(len(val_tokens), block))
        for split in ("train", "val"):
            tokens = val_tokens if split == "val" else np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
            starts = None if split == "val" else np.linspace(0, len(tokens) - block - 1, n_windows).astype(int).tolist()
            out[f"{split}_loss"] = float(token_losses(raw_model, tokens, block, batch_size, device, starts, autocast).mean())
        if config.embedding_loss != "none":  # on one fixed batch: it is not a per-token figure
            with autocast:
                eval_model(*get_batch("val", eval_rng("val", 0)), return_logits=return_logits)
            out["val_embedding_loss"] = raw_model.last_loss_terms["embedding"]
        out.update(embedding_norms())
        eval_model.train()
        return out
    for split in ("train", "val"):
        ce, embedding = [], []
        for k in range(eval_iters):
            x, y = get_batch(split, eval_rng(split, k))
            with autocast:
                eval_model(x, y, return_logits=return_logits)
            terms = raw_model.last_loss_terms
            ce.append(terms["ce"])
            embedding.append(terms["embedding"])
        out[f"{split}_loss"] = sum(ce) / len(ce)
        out[f"{split}_embedding_loss"] = None if embedding[0] is None else sum(embedding) / len(embedding)
    out.update(embedding_norms())
    if dataset == "reversal":
        out["val_accuracy"] = reversal.accuracy(raw_model, held_out, device)
    eval_model.train()
    return out


def measure_peak_flops():
    """FLOP/s of a large matmul in the run's dtype: the MFU denominator, measured since a CPU has no datasheet peak."""
    n = 4096 if device_type == "cuda" else 1024
    a, b = torch.randn(n, n, device=device, dtype=ptdtype), torch.randn(n, n, device=device, dtype=ptdtype)
    seconds = []
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        if device_type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
    return 2 * n ** 3 / min(seconds)  # the fastest try: the least disturbed by warm-up and other processes


def stop_non_finite(what):
    fail(f"non-finite {what} at iteration {iter_num}: stopped; the last good checkpoint {ckpt_path} is kept. "
         f"Lower --learning_rate or raise --warmup_iters")


# -----------------------------------------------------------------------------
# training loop

tokens_per_iter = gradient_accumulation_steps * batch_size * block
flops_per_token = raw_model.flops_per_token(block)
peak_flops = measure_peak_flops()
log_path = os.path.join(out_dir, "log.jsonl")
if master:
    os.makedirs(out_dir, exist_ok=True)
    if init_from == "resume" and os.path.exists(log_path):  # drop what was logged after the checkpoint
        with open(log_path) as f:
            kept = [line for line in f if line.strip() and json.loads(line)["iter"] <= iter_num]
        with open(log_path, "w") as f:
            f.writelines(kept)
    elif init_from == "scratch" and os.path.exists(log_path):
        os.remove(log_path)
    print(f"{config.variant}: {raw_model.num_params():,} parameters; {tokens_per_iter:,} tokens per iteration "
          f"({world_size} process{'es' * (world_size > 1)}, {device}, {dtype}); "
          + (f"resuming at iteration {iter_num}" if init_from == "resume" else "from scratch"))
run_start = interval_start = time.time()
interval_tokens = 0
while True:
    lr = get_lr(iter_num)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if (iter_num % eval_interval == 0 or iter_num >= max_iters) and not (init_from == "resume" and iter_num == start_iter):
        if device_type == "cuda":
            torch.cuda.synchronize()
        tokens_per_sec = interval_tokens / (time.time() - interval_start) if interval_tokens else None
        if master:
            record = {"iter": iter_num, "tokens": iter_num * tokens_per_iter, **evaluate(), "lr": lr,
                      "grad_norm": grad_norm.item() if iter_num > start_iter else None, "tokens_per_sec": tokens_per_sec,
                      "mfu": None if tokens_per_sec is None else flops_per_token * tokens_per_sec / world_size / peak_flops}
            bad = [f"{k}={v}" for k, v in record.items() if k.endswith("loss") and v is not None and not math.isfinite(v)]
            if bad:
                stop_non_finite(", ".join(bad))
            print(f"eval {iter_num}: train loss {record['train_loss']:.4f}, val loss {record['val_loss']:.4f}"
                  + (f", val accuracy {record['val_accuracy']:.1%}" if "val_accuracy" in record else ""))
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if always_save_checkpoint or record["val_loss"] < best_val_loss:
                best_val_loss = min(best_val_loss, record["val_loss"])
                save_checkpoint()
        interval_start, interval_tokens = time.time(), 0
    if iter_num >= max_iters:
        break

    for micro_step in my_micro_steps:
        rng = batch_rng(iter_num, micro_step)
        torch.manual_seed(int(rng.integers(2 ** 62)))  # dropout masks, like the batch, depend on (seed, it, micro_step) only
        x, y = get_batch("train", rng)
        # gradients are all-reduced (averaged over processes) only after the last micro-step
        with model.no_sync() if ddp and micro_step != my_micro_steps[-1] else nullcontext():
            with autocast:
                _, loss = model(x, y, return_logits=return_logits)
            (loss / len(my_micro_steps)).backward()  # the mean over the global batch, once DDP has averaged
    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), grad_clip or float("inf"))  # the norm before clipping
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    interval_tokens += tokens_per_iter

    if iter_num % log_interval == 0:  # the only place the hot loop waits for the device
        terms = raw_model.last_loss_terms
        if not math.isfinite(loss.item()):
            stop_non_finite(f"loss={loss.item()}")
        if master:  # speeds are averages since the last evaluation
            tokens_per_sec = interval_tokens / (time.time() - interval_start)
            embedding = f", embedding loss {terms['embedding']:.3e}" if terms["embedding"] is not None else ""
            print(f"iter {iter_num}: loss {terms['ce']:.4f}{embedding}, grad norm {grad_norm.item():.3f}, lr {lr:.2e}, "
                  f"{tokens_per_iter / tokens_per_sec * 1000:.0f} ms/iter, {tokens_per_sec:,.0f} tokens/s, "
                  f"mfu {flops_per_token * tokens_per_sec / world_size / peak_flops:.1%}")
if master:
    print(f"done: {iter_num} iterations in {time.time() - run_start:.1f}s; checkpoint and log in {out_dir}/")
if ddp:
    dist.destroy_process_group()
