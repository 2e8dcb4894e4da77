"""
Train the auto-regressive encoder-decoder transformer, or the decoder-only baseline it is compared with.

    python train.py --dataset=reversal                      # zero-setup demo: a small model reverses digits
    python train.py config/paper_encdec_mse_pos_sub.py      # an appendix run of the write-up (prepare the data first)
    python train.py config/cpu_baseline.py --max_iters=100  # a config file, then --key=value overrides
    python train.py --help                                  # every setting, its default and what it means
    torchrun --standalone --nproc_per_node=8 train.py config/paper_baseline.py   # DDP

The write-up is "Auto-regressive Encoder-Decoder Transformer" (Yan, 2024); its earlier draft is
"Parallel Encoder-Decoder Transformer".

Each optimizer step's sequences are a function of (seed, iteration): a resumed run, a DDP run and a run that
splits the same step into other micro-batches (batch_size x gradient_accumulation_steps unchanged) train on the same
sequences, and log the same losses (to float rounding; exactly, for the same split).
"""
import atexit
import dataclasses
import io
import math
import os
import re
import sys
import time
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import reversal
from configurator import (compile_failure, configure, duration, fail, forward_seconds, machine_error, matmul_peak,
                          pick_device, script_start, sync)
from data import (append_log, check_dataset, check_same_data, checkpoint_log, embedding_norms, hold_folder,
                  load_checkpoint, make_folder, note_holder, prepare_hint, remove_empty_folders,
                  remove_stale_temporaries, split_losses, truncate_log, window_starts, write_atomic, write_error)
from model import ModelConfig, build_model, logits_needed


def on_interrupt(kind, value, tb):
    """Ctrl-C (and SIGTERM, SIGHUP), out of memory, torch.compile without a compiler: one line saying where the last
    checkpoint is, instead of a traceback."""
    error = machine_error(value, "--batch_size (a larger --gradient_accumulation_steps keeps the batch per step) "
                                 "or --context_size")
    if not issubclass(kind, KeyboardInterrupt) and not error:
        return sys.__excepthook__(kind, value, tb)
    saved = globals().get("saved_iter")  # write_atomic removes the temporary file of a save cut short
    kept = (f"the last checkpoint is {ckpt_path} (iteration {saved}); continue with `{resume_command}`"
            if saved is not None else "no checkpoint was saved yet")
    if error:  # in any process: it may be the only one short of memory
        print(f"error: {error}; {kept}" + " and that setting" * (saved is not None), file=sys.stderr)
    elif int(os.environ.get("RANK", 0)) == 0:
        print(f"interrupted at iteration {globals().get('iter_num', 0)}: {kept}", file=sys.stderr)


sys.excepthook = on_interrupt
script_start()
# -----------------------------------------------------------------------------
# settings; the defaults train the write-up's model (13 + 13 layers, 150 wide) as its appendix runs did (one A100,
# 9k steps); --dataset=reversal has its own small model and schedule (reversal.DEFAULTS)
out_dir = ""  # folder for ckpt.pt and log.jsonl; "" means out/<dataset>, e.g. out/reversal
dataset = "wikipedia"  # data/<dataset>/{train,val}.bin and meta.json, or "reversal" (generated here)
batch_size = 50  # sequences per micro-batch
gradient_accumulation_steps = 16  # micro-batches per optimizer step, over all processes together
max_iters = 9000  # optimizer steps of the whole run
learning_rate = 9e-4  # peak learning rate, reached at the end of the warmup
decay_lr = True  # linear warmup, then cosine decay to min_lr; False: constant learning_rate
min_lr = 9e-5  # the learning rate at the end of the cosine decay
warmup_iters = 300  # steps of linear warmup
lr_decay_iters = 700000  # steps of warmup plus cosine; far beyond max_iters, as in the write-up
weight_decay = 0.1  # AdamW weight decay of matmul weights and embeddings
beta1 = 0.9  # AdamW beta1
beta2 = 0.95  # AdamW beta2
grad_clip = 1.0  # clip the gradient norm to this; 0 disables
eval_interval = 500  # steps between evaluations (and checkpoints)
eval_iters = 200  # batches per split at each evaluation; 0: every val token once (see evaluate.py)
log_interval = 10  # steps between progress lines (and at least one a minute)
init_from = "scratch"  # scratch | resume (from out_dir/ckpt.pt)
overwrite = False  # True: a run from scratch may replace the checkpoint and log already in out_dir
always_save_checkpoint = True  # False: save only when the val loss improves
seed = 1337  # random seed of the initial weights, batches and dropout
device = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:N | mps
dtype = "auto"  # auto (CUDA: bfloat16 where the GPU has it, else float16; else float32) | float32 | bfloat16 | float16
compile = False  # torch.compile the model; on one GPU with one micro-batch per step, replayed as CUDA graphs
wandb_log = False  # also log each evaluation to Weights & Biases (pip install wandb; WANDB_MODE=offline: no account)
wandb_project = "ar-encoder-decoder"  # its Weights & Biases project
wandb_run_name = ""  # its run name; "" means out_dir
# every ModelConfig field is a global of the same name; None keeps the variant's default (see model.py)
globals().update(dict.fromkeys(ModelConfig.flags()))
# -----------------------------------------------------------------------------
# config: `python train.py [config/file.py ...] [--key=value ...]`, later ones win
defaults = {k: v for k, v in globals().items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))}
user_set = configure(globals(), defaults, sys.argv[1:], ModelConfig, epilog="\n--dataset=reversal uses its own small "
                     "model and schedule for the settings not given (reversal.DEFAULTS); the write-up's shape on that "
                     "task: config/reversal_paper.py.")
if init_from not in ("scratch", "resume"):
    fail(f"init_from={init_from!r} is not allowed; use --init_from=scratch or --init_from=resume")
out_dir = out_dir or os.path.join("out", dataset)  # each dataset its own folder, as each config its own
ckpt_path, log_path = os.path.join(out_dir, "ckpt.pt"), os.path.join(out_dir, "log.jsonl")
resume_command = f"python train.py --out_dir={out_dir} --init_from=resume"
checkpoint, saved_iter, master = None, None, int(os.environ.get("RANK", 0)) == 0  # rank 0 of torchrun writes
restored, logged = {}, []  # the settings a resume takes from its checkpoint; the run's log records, for its checkpoints
if init_from == "resume":  # the checkpoint's settings fill in every key not set here
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path} to resume from; train with --init_from=scratch first, or set --out_dir")
    if master:  # before reading the checkpoint: a second process resuming the same run would repeat its steps
        hold_folder(out_dir, "--out_dir")
    checkpoint, _ = load_checkpoint(out_dir, fix="restore a good copy or train from scratch in a new --out_dir")
    logged = checkpoint_log(log_path, checkpoint, ckpt_path)  # and not another run's checkpoint, put in its folder
    saved_config, saved = ModelConfig(**checkpoint["model_config"]), checkpoint["train_config"]
    for key in ("dataset", "seed"):  # the seed draws the batches and the evaluation batches: a new one breaks curves
        if key in user_set and globals()[key] != saved[key]:
            fail(f"{ckpt_path} was trained with {key}={saved[key]!r}, not {globals()[key]!r}; "
                 f"drop --{key} to resume it")
    restored = {k: v for k, v in saved.items() if k not in user_set | {"out_dir", "init_from", "overwrite"}}
    globals().update(restored)
    user_set |= restored.keys()
if dataset == "reversal":  # the sequence-reversal study's toy task: the walk-through's small model, a short schedule
    own = {k: v for k, v in reversal.DEFAULTS.items() if k not in user_set}
    globals().update(own)
    if own:
        print("reversal: using its own defaults for " + ", ".join(f"{k}={v}" for k, v in own.items()))
# -----------------------------------------------------------------------------
# checks: every setting's range, before anything is written; one line naming the setting and the fix
checks = {  # setting: (is the value allowed?, what to use instead)
    "batch_size": (batch_size >= 1, "use a positive number of sequences"),
    "gradient_accumulation_steps": (gradient_accumulation_steps >= 1, "use a positive number of micro-batches"),
    "max_iters": (max_iters >= 0, "use 0 or more steps"),
    "learning_rate": (0 < learning_rate < math.inf, "use a positive number, e.g. 1e-3"),
    "min_lr": (0 <= min_lr <= learning_rate, "use 0 or a positive number up to learning_rate"),
    "warmup_iters": (warmup_iters >= 0, "use 0 or more steps"),
    "lr_decay_iters": (lr_decay_iters >= 0, "use 0 or more steps"),
    "weight_decay": (0 <= weight_decay < math.inf, "use 0 or a positive number, e.g. 0.1"),
    "beta1": (0 <= beta1 < 1, "use a number in [0, 1), e.g. 0.9"),
    "beta2": (0 <= beta2 < 1, "use a number in [0, 1), e.g. 0.95"),
    "grad_clip": (0 <= grad_clip < math.inf, "use a positive gradient norm, e.g. 1.0, or 0 for no clipping"),
    "eval_interval": (eval_interval >= 1, "use a positive number of steps"),
    "eval_iters": (eval_iters >= (dataset == "reversal"),
                   "use a positive number of batches, or 0 for every val token (not for reversal)"),
    "log_interval": (log_interval >= 1, "use a positive number of steps"),
    "seed": (0 <= seed < 2 ** 63, "use an integer from 0 to 2**63 - 1"),
    "dataset": (re.fullmatch(r"[\w.-]+", dataset) is not None, "give a folder name of data/, or reversal"),
}
for key, (allowed, fix) in checks.items():
    if not allowed:
        fail(f"{key}={globals()[key]!r} is not allowed; {fix}")
try:
    device, dtype = pick_device(device, dtype)
except SystemExit as e:  # a resume on a machine without the checkpoint's device or precision
    if not {"device", "dtype"} & restored.keys():
        raise
    fail(f"{ckpt_path} ran with device={device!r}, dtype={dtype!r}; here {str(e.code).removeprefix('error: ')}")
if checkpoint is not None:  # resumed on other hardware or precision: it goes on, but not as the run it was
    changed = [k for k in ("device", "dtype", "compile") if globals()[k] != saved[k]]
    if changed and master:
        print(f"note: resuming with {', '.join(f'{k}={globals()[k]!r}' for k in changed)}, not the checkpoint's "
              f"{', '.join(f'{k}={saved[k]!r}' for k in changed)}: the losses will differ a little from an "
              f"unbroken run's", flush=True)
if init_from == "scratch" and not overwrite:
    if os.path.exists(ckpt_path):
        fail(f"{ckpt_path} already holds a trained model; continue it with --init_from=resume, train in another "
             f"--out_dir, or replace it with --overwrite=True")
    if os.path.exists(log_path):  # a log without its checkpoint, such as a study's committed results
        fail(f"{log_path} holds the log of an earlier run; train in another --out_dir, or replace it with "
             f"--overwrite=True")
train_config = {k: globals()[k] for k in defaults}  # saved in checkpoints
if wandb_log and master:  # imported only when asked; its run starts once every check has passed
    try:
        import wandb
    except ImportError:
        fail("wandb_log=True needs Weights & Biases, which is not installed: pip install wandb, or train without it: "
             "--wandb_log=False")
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
if gradient_accumulation_steps % world_size:
    steps = math.lcm(gradient_accumulation_steps, world_size)  # the same step of sequences in smaller micro-batches
    same_step = (f", e.g. --batch_size={batch_size * gradient_accumulation_steps // steps} --gradient_accumulation_steps="
                 f"{steps} (the same {batch_size * gradient_accumulation_steps} sequences per step)"
                 if batch_size * gradient_accumulation_steps % steps == 0 else "")
    fail(f"gradient_accumulation_steps={gradient_accumulation_steps} must be divisible by the {world_size} "
         f"processes; change one of them{same_step}")
my_micro_steps = list(range(rank, gradient_accumulation_steps, world_size))  # rank r of W: micro-steps r, r+W, ...


def all_sum(value):
    """value summed over the processes (DDP), else value itself: every process sees the same, and stops or not."""
    if not ddp:
        return value
    total = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return total.item()


@contextmanager
def stop_together():
    """Around the work of rank 0 alone: with DDP, a stop there (`fail`, an error) stops every process, rank 0 with its
    one line, the others silently, rather than leaving them to die with "connection closed" tracebacks."""
    error = None
    try:
        yield
    except (SystemExit, Exception) as e:
        error = e
    if not all_sum(error is not None):
        return
    if ddp:  # rank 0 says why before any process leaves (torchrun ends the others once one has)
        if isinstance(error, SystemExit):
            print(error.code, file=sys.stderr, flush=True)
        elif error is not None:
            sys.excepthook(type(error), error, error.__traceback__)
        dist.barrier()
        raise SystemExit(1)
    raise error


device_type, ptdtype = device.split(":")[0], getattr(torch, dtype)  # cuda, mps or cpu
autocast = torch.autocast(device_type, dtype=ptdtype) if dtype != "float32" else nullcontext()
# float16 gradients underflow: the loss is scaled up before backward, and a step with inf / NaN gradients is skipped
scaler = torch.amp.GradScaler(device_type, enabled=dtype == "float16")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
# -----------------------------------------------------------------------------
# data: get_batch(split, rng) -> (x, y) on the device
if dataset == "reversal":
    train_sequences, held_out = reversal.split()
    dataset_vocab, block, meta = reversal.VOCAB_SIZE, reversal.BLOCK_SIZE, {}
    if context_size < block:
        fail(f"context_size={context_size} is too short for reversal sequences of {block} tokens; "
             f"leave context_size unset")

    def get_batch_cpu(split, rng, size=batch_size, rows=slice(None)):
        x, y = reversal.get_batch(train_sequences if split == "train" else held_out, size, rng)
        return x[rows], y[rows]
else:
    data_dir = os.path.join("data", dataset)
    if os.path.isdir(data_dir):  # held, shared with other runs, until the run ends: no preparation replaces it now
        hold_folder(data_dir, "--dataset", shared=True)
        note_holder(data_dir, " ".join(["train.py", *sys.argv[1:]]), shared=True)
    block = context_size or ModelConfig.context_size
    meta = check_dataset(dataset, block, vocab_size)
    dataset_vocab = meta["vocab_size"]
    if checkpoint is not None:  # the same tokens and text as the run so far
        check_same_data(checkpoint, meta, dataset, training=True)

    def get_batch_cpu(split, rng, size=batch_size, rows=slice(None)):
        data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")  # reopened: no growth
        ix = rng.integers(len(data) - block, size=size)[rows]
        x = torch.from_numpy(np.stack([data[i:i + block] for i in ix]).astype(np.int64))
        y = torch.from_numpy(np.stack([data[i + 1:i + 1 + block] for i in ix]).astype(np.int64))
        return x, y


def get_batch(split, rng, size=batch_size, rows=slice(None)):
    """(x, y) on the device: rows `rows` of `size` sequences drawn by rng."""
    x, y = get_batch_cpu(split, rng, size, rows)
    if device_type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def train_batch(it, micro_step):
    """Micro-batch `micro_step` of iteration `it`: its rows of the step's batch_size x gradient_accumulation_steps
    sequences, drawn from (seed, it) alone; whatever the micro-batch size, process count and restarts."""
    rows = slice(micro_step * batch_size, (micro_step + 1) * batch_size)
    rng = np.random.default_rng([seed, 0, it, 0])
    rng.integers(2 ** 62)  # micro-step 0's dropout seed (dropout_seed) is drawn first, then the step's sequences
    return get_batch("train", rng, batch_size * gradient_accumulation_steps, rows)


def dropout_seed(it, micro_step):
    return int(np.random.default_rng([seed, 0, it, micro_step]).integers(2 ** 62))


def eval_rng(split, k):
    return np.random.default_rng([seed, 1 + ("train", "val").index(split), k, 0])  # the same batches at each eval


if vocab_size is None:
    vocab_size = dataset_vocab
elif vocab_size < dataset_vocab:  # e.g. a byte-level config (256) on GPT-2 tokens
    wanted_tokenizer = "byte" if vocab_size <= 256 else "gpt2"
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {dataset_vocab} tokens; leave vocab_size unset"
         + (f", or prepare data/{dataset} again: {prepare_hint(dataset, wanted_tokenizer)}"
            if dataset != "reversal" else ""))
with stop_together():
    if master:  # one process at a time in out_dir; stale temporary files of an interrupted write go
        created = make_folder(out_dir)
        atexit.register(remove_empty_folders, out_dir, created)  # a run stopped before it wrote: no empty folder
        if init_from == "scratch":
            hold_folder(out_dir, "--out_dir")
        note_holder(out_dir, " ".join(["train.py", *sys.argv[1:]]))
        remove_stale_temporaries(out_dir)
# -----------------------------------------------------------------------------
# model, optimizer, checkpoint
try:
    config = ModelConfig(**{k: globals()[k] for k in ModelConfig.flags() if globals()[k] is not None})
except ValueError as e:
    fail(e)
iter_num, best_val_loss, tokens_seen, wandb_run_id = 0, float("inf"), 0, None
if checkpoint is not None:
    diffs = [(k, v, getattr(config, k)) for k, v in dataclasses.asdict(saved_config).items() if getattr(config, k) != v]
    if diffs:
        fail(f"{ckpt_path} was trained with {', '.join(f'{k}={v!r}' for k, v, _ in diffs)}, but this run asks for "
             f"{', '.join(f'{k}={new!r}' for k, _, new in diffs)}; drop those flags to resume"
             + (f" (vocab_size comes from data/{dataset}/meta.json: prepare it as for training)"
                if "vocab_size" in [d[0] for d in diffs] else ""))
    iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    wandb_run_id = checkpoint.get("wandb_run_id")  # a resumed run goes on in its W&B run
    # the tokens trained on so far, carried over: a resume may change batch_size (older checkpoints: computed)
    tokens_seen = checkpoint.get("tokens", iter_num * saved["gradient_accumulation_steps"] * saved["batch_size"]
                                 * saved_config.context_size)
start_iter = iter_num
if init_from == "resume":
    saved_iter = iter_num  # the iteration of the checkpoint in out_dir (None: none yet)
torch.manual_seed(seed)  # the same initial weights in every process
raw_model = build_model(config).to(device)
optimizer = raw_model.configure_optimizer(weight_decay, learning_rate, (beta1, beta2), device_type)
if checkpoint is not None:
    raw_model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if scaler.is_enabled() and checkpoint.get("scaler"):  # its scale: a resumed float16 run stays exact
        scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["rng"]["cpu"].cpu())
    if device_type in ("cuda", "mps") and checkpoint["rng"].get(device_type) is not None:
        getattr(torch, device_type).set_rng_state(checkpoint["rng"][device_type].cpu())
    checkpoint = None  # free the memory
return_logits = logits_needed(config, device_type, batch_size * block)


def wrap(model):
    """The model that trains: under DDP, wrapped to average the gradients over the processes."""
    return DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])] if device_type == "cuda" else None) if ddp else model


def compile_error(compiled):
    """One training step's forward and backward (twice: CUDA graphs record on the second) and one evaluation pass of
    the compiled model, before the run starts: the error where this torch release cannot compile it, else None."""
    try:
        x, y = train_batch(0, 0)
        for _ in range(2):  # without DDP's wrapper (no gradient exchange): DDP compiles its own graphs later
            with autocast:
                loss = compiled(x, y, return_logits=return_logits)[1]
            loss.backward()
        with torch.no_grad(), autocast:
            compiled.eval()(x, y, return_logits=return_logits)
        error = None
    except Exception as e:  # a compiler's error can be of any class
        if (machine_error(e, "") or "").startswith("out of memory"):
            raise
        error = e
    compiled.train()
    raw_model.zero_grad(set_to_none=True)
    return error


model = raw_model
if compile:
    # Training shapes never change: on one GPU, "reduce-overhead" replays each step as CUDA graphs, one launch instead
    # of hundreds (what bounds small models). Not with gradient accumulation: a replay writes its gradients into the
    # buffers of the last one, which .grad may still hold, so a sum over micro-steps can lose terms silently
    # (PyTorch issue 96693) or stop with an error (169545). Under DDP, with accumulation and on a CPU (no CUDA
    # graphs): the default mode.
    cuda_graphs = device_type == "cuda" and not ddp and gradient_accumulation_steps == 1
    model = torch.compile(raw_model, mode="reduce-overhead" if cuda_graphs else None)
    error = compile_error(model)
    if all_sum(error is not None):  # every process goes on uncompiled if one could not compile
        model = raw_model
        if master:
            print("warning: " + (compile_failure(error, "training without it (--compile=False skips the attempt)")
                                 if error else "torch.compile failed in another process; training without it"),
                  file=sys.stderr, flush=True)
eval_model = model
model = wrap(model)


def stop_write_failed(path, error, size=None):
    """A failed write, most often a full disk: one line; what was written before is kept."""
    kept = (f"the checkpoint {ckpt_path} (iteration {saved_iter}) is kept" if saved_iter is not None
            else "no checkpoint was saved yet")
    fail(f"could not write {path}: {write_error(path, error, size)}; {kept}, "
         + (f"continue with `{resume_command}`" if saved_iter is not None else "then start again"))


def save_checkpoint():
    global saved_iter
    checkpoint = {"model_config": dataclasses.asdict(config), "model": raw_model.state_dict(),
                  "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                  "iter_num": iter_num,  # also the data position: batches are a function of (seed, iteration)
                  "tokens": tokens_seen, "best_val_loss": best_val_loss, "train_config": train_config,
                  "wandb_run_id": wandb_run_id, "log": logged,  # a resume checks that the log is this run's
                  "dataset_meta": meta,  # sample.py checks that data/<dataset>/meta.json still has this tokenizer
                  "rng": {"cpu": torch.get_rng_state(),
                          "cuda": torch.cuda.get_rng_state() if device_type == "cuda" else None,
                          "mps": torch.mps.get_rng_state() if device_type == "mps" else None}}
    buffer = io.BytesIO()  # in memory first: torch's zip writer turns a full disk into an unclear error
    torch.save(checkpoint, buffer)
    write_atomic(ckpt_path, buffer.getbuffer(), on_error=stop_write_failed)
    saved_iter = iter_num


def get_lr(it):
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (learning_rate - min_lr)
# -----------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def evaluate():
    """Mean cross-entropy and embedding loss over eval_iters fixed batches per split, in eval mode (no dropout)."""
    eval_model.eval()
    out = {}
    if eval_iters == 0 and dataset != "reversal":  # every val token once, and as many train windows spread evenly
        out.update(split_losses(raw_model, data_dir, block, batch_size, device, autocast))
        if config.embedding_loss != "none":  # on one fixed batch: it is not a per-token figure
            with autocast:
                _, _, terms = eval_model(*get_batch("val", eval_rng("val", 0)), return_logits=return_logits)
            out["val_embedding_loss"] = terms["embedding"].item()
        out.update(embedding_norms(raw_model))
        eval_model.train()
        return out
    for split in ("train", "val"):
        ce, embedding = [], []
        for k in range(eval_iters):
            x, y = get_batch(split, eval_rng(split, k))
            with autocast:
                _, _, terms = eval_model(x, y, return_logits=return_logits)
            ce.append(terms["ce"].item())
            embedding.append(None if terms["embedding"] is None else terms["embedding"].item())
        out[f"{split}_loss"] = sum(ce) / len(ce)
        out[f"{split}_embedding_loss"] = None if embedding[0] is None else sum(embedding) / len(embedding)
    out.update(embedding_norms(raw_model))
    if dataset == "reversal":
        out["val_accuracy"] = reversal.accuracy(raw_model, held_out, device)
    eval_model.train()
    return out
# -----------------------------------------------------------------------------
# speed: the run's time, estimated before it starts


def evals_left(it):
    """Evaluations from iteration `it` to the end: every eval_interval, and at max_iters."""
    return max(0, max_iters // eval_interval - (it - 1) // eval_interval) + (max_iters % eval_interval != 0)


def stop_non_finite(what):
    fail(f"non-finite {what} at iteration {iter_num}: stopped; the last good checkpoint {ckpt_path} is kept. "
         f"Lower --learning_rate or raise --warmup_iters")
# -----------------------------------------------------------------------------
# training loop


tokens_per_iter = gradient_accumulation_steps * batch_size * block
flops_per_token = raw_model.flops_per_token(block)
# the MFU denominator: the fastest of 10 large matmuls in the run's dtype, measured since a CPU has no datasheet peak
# (float32's on a CPU, where autocast only tests the GPU's code path: a float16 matmul there takes seconds)
peak_flops = matmul_peak(device, ptdtype if device_type != "cpu" else torch.float32,
                         4096 if device_type == "cuda" else 1024, 10, warmup=0, pick=min)
peak_timed_again = device_type != "cpu"  # a GPU's peak, timed on large matmuls, is not disturbed by other work


def mfu(tokens_per_sec):
    """Model FLOPs utilization: the model's FLOP/s over peak_flops. A CPU busy with other work while its peak was timed
    gives too low a peak: an MFU above 100% times it again, once (the progress line says so if it stays above)."""
    global peak_flops, peak_timed_again
    if flops_per_token * tokens_per_sec / world_size > peak_flops and not peak_timed_again:
        peak_timed_again = True
        peak_flops = max(peak_flops, matmul_peak(device, torch.float32, 1024, 10, warmup=0, pick=min))
    return flops_per_token * tokens_per_sec / world_size / peak_flops


def percent(fraction):
    """At least two significant digits: 45%, 5.2%, 0.031% (a tiny model on a GPU is not 0.0%)."""
    p = 100 * fraction
    return f"{p:.{max(0, 1 - math.floor(math.log10(p)))}f}%" if p > 0 else "0%"


with stop_together():
    if master:
        if wandb_log:  # now that every check has passed: a run that stops on its own checks leaves no W&B run
            try:
                wandb_run = wandb.init(project=wandb_project, name=wandb_run_name or out_dir, id=wandb_run_id,
                                       resume="allow")
                wandb_run.config.update(train_config, allow_val_change=True)  # a resume may change some
            except Exception as e:  # no API key, no network
                fail(f"W&B could not start ({type(e).__name__}: {(str(e).strip() or '?').splitlines()[0]}); log in "
                     f"with `wandb login`, log offline with WANDB_MODE=offline, or train without it: --wandb_log=False")
            wandb_run_id = wandb_run.id  # saved in the checkpoints: a resume goes on in this W&B run
        if init_from == "resume":
            truncate_log(log_path, iter_num, on_error=stop_write_failed)
        else:  # checked above: no checkpoint here, or --overwrite=True
            for path in (log_path, ckpt_path):
                if os.path.exists(path):
                    os.remove(path)
        print(f"{config.variant}: {raw_model.num_params():,} parameters; {tokens_per_iter:,} tokens per iteration "
              f"({world_size} process{'es' * (world_size > 1)}, {device}, {dtype}); "
              + (f"resuming at iteration {iter_num}" if init_from == "resume" else "from scratch"))
        # early, before a long first evaluation: how long the run will take, timed on one forward pass
        forward = forward_seconds(raw_model, *get_batch("val", eval_rng("val", 0)), autocast, return_logits)
        eval_batches = eval_iters or math.ceil(
            len(window_starts(os.path.getsize(os.path.join(data_dir, "val.bin")) // 2, block)) / batch_size)
        iter_seconds, eval_seconds = 3 * len(my_micro_steps) * forward, 2 * eval_batches * forward
        total = (max_iters - iter_num) * iter_seconds + evals_left(iter_num + (init_from == "resume")) * eval_seconds
        print(f"estimated: {duration(iter_seconds)} per iteration, {duration(eval_seconds)} per evaluation, "
              f"{duration(total)} in all", flush=True)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0  # Windows has no load average
        if device_type == "cpu" and load > os.cpu_count() - 0.5 and torch.get_num_threads() > 1:
            print(f"warning: the CPU is busy (load {load:.1f} on {os.cpu_count()} cores), and this run's "
                  f"{torch.get_num_threads()} threads will wait on the others: run several at once with "
                  f"OMP_NUM_THREADS=1 each, as study.py does", flush=True)
        if device_type == "cpu" and total > 3 * 3600:
            print(f"warning: this run would take about {duration(total)} on this CPU; for a CPU-sized run, "
                  f"try `python train.py config/cpu_baseline.py` (minutes)", flush=True)
run_start = interval_start = last_print = time.time()
interval_tokens = 0
while True:
    lr = get_lr(iter_num)
    for group in optimizer.param_groups:
        group["lr"] = lr
    resumed_here = init_from == "resume" and iter_num == start_iter  # its evaluation is in the log already
    if (iter_num % eval_interval == 0 or iter_num >= max_iters) and not resumed_here:
        sync(device)
        tokens_per_sec = interval_tokens / (time.time() - interval_start) if interval_tokens else None
        with stop_together():  # evaluation, log and checkpoint: rank 0's work
            if master:
                if eval_seconds > 30:  # a long evaluation says so first
                    print(f"eval {iter_num}: evaluating, about {duration(eval_seconds)}", flush=True)
                eval_start = time.time()
                record = {"iter": iter_num, "tokens": tokens_seen, **evaluate(), "lr": lr,
                          "grad_norm": grad_norm.item() if iter_num > start_iter else None,  # inf: a skipped step
                          **({"grad_scale": scaler.get_scale()} if scaler.is_enabled() else {}),
                          "tokens_per_sec": tokens_per_sec,
                          "mfu": tokens_per_sec and mfu(tokens_per_sec)}
                bad = [f"{k}={v}" for k, v in record.items()
                       if k.endswith("loss") and v is not None and not math.isfinite(v)]
                if bad:
                    stop_non_finite(", ".join(bad))
                eval_seconds = time.time() - eval_start
                print(f"eval {iter_num}: train loss {record['train_loss']:.4f}, val loss {record['val_loss']:.4f}"
                      + (f", val accuracy {record['val_accuracy']:.1%}" if "val_accuracy" in record else ""),
                      flush=True)
                append_log(log_path, record, on_error=stop_write_failed)
                logged.append(record)
                if wandb_log:
                    wandb.log({k: v for k, v in record.items() if v is not None}, step=iter_num)
                if always_save_checkpoint or record["val_loss"] < best_val_loss:
                    best_val_loss = min(best_val_loss, record["val_loss"])
                    save_checkpoint()
        interval_start, interval_tokens = time.time(), 0
        last_print = interval_start
    if iter_num >= max_iters:
        break

    for micro_step in my_micro_steps:
        if config.dropout:  # its masks, the only random draws of a step, depend on (seed, it, micro_step) only
            torch.manual_seed(dropout_seed(iter_num, micro_step))  # (not free: it seeds every device's generator)
        x, y = train_batch(iter_num, micro_step)
        # gradients are all-reduced (averaged over processes) only after the last micro-step
        with model.no_sync() if ddp and micro_step != my_micro_steps[-1] else nullcontext():
            with autocast:
                _, loss, terms = model(x, y, return_logits=return_logits)
            scaler.scale(loss / len(my_micro_steps)).backward()  # the mean over the global batch, once DDP has averaged
    scaler.unscale_(optimizer)  # float16: the true gradients again, for clipping and the logged norm
    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), grad_clip or float("inf"))  # before clipping
    scaler.step(optimizer)  # float16: no step where a gradient overflowed; the scale halves instead (not divergence)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    interval_tokens += tokens_per_iter
    tokens_seen += tokens_per_iter

    if iter_num % log_interval == 0:  # the only place the loop waits for the device
        loss_sum = all_sum(loss.item())  # over the processes: all stop, or none
        with stop_together():
            if master and not math.isfinite(loss_sum):
                stop_non_finite(f"loss={loss_sum / world_size}")
    if master and (iter_num % log_interval == 0 or time.time() - last_print > 60):  # and a line a minute in slow runs
        tokens_per_sec = interval_tokens / (time.time() - interval_start)  # speeds: averages since the last evaluation
        iter_seconds = tokens_per_iter / tokens_per_sec
        embedding = f", embedding loss {terms['embedding'].item():.3e}" if terms["embedding"] is not None else ""
        scale = f" (float16 grad scale {scaler.get_scale():.0f})" if scaler.is_enabled() else ""
        utilization = mfu(tokens_per_sec)
        busy = " (above 100%: the CPU was busy while its peak was timed)" if utilization > 1 else ""
        print(f"iter {iter_num}: loss {terms['ce'].item():.4f}{embedding}, grad norm {grad_norm.item():.3f}{scale}, "
              f"lr {lr:.2e}, {iter_seconds * 1000:.0f} ms/iter, {tokens_per_sec:,.0f} tokens/s, "
              f"mfu {percent(utilization)}{busy}, "
              f"ETA {duration((max_iters - iter_num) * iter_seconds + evals_left(iter_num) * eval_seconds)}",
              flush=True)
        last_print = time.time()
if master:
    print(f"done: {iter_num} iterations in {time.time() - run_start:.1f}s; checkpoint and log in {out_dir}/")
if ddp:
    dist.barrier()  # every process waits for the last evaluation and checkpoint, then all leave together
    dist.destroy_process_group()
