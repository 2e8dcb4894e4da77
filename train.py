"""Train the encoder-decoder of "Auto-regressive Encoder-Decoder Transformer" (Yan, 2024),
its earlier draft's parallel one, or the decoder-only baseline.

    python train.py --dataset=reversal      # no setup: a small model reverses digits
    python train.py config/cpu_baseline.py  # a config file; --key=value after it wins
    python train.py --help                  # every setting, its default and meaning
    torchrun --standalone --nproc_per_node=8 train.py config/paper_baseline.py  # DDP
"""
import dataclasses
import math
import os
import re
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist

from configurator import apply, configure
from data import Batches, introduce_run, is_task, load_task, open_dataset, split_losses
from machinery import checkpoints, hardware, process
from model import ModelConfig, build_model, get_lr, logits_needed

def kept():
    """The run's last line on a stop or an error: what is kept, how to go on."""
    if stop.saved_iter is None:
        return "no checkpoint was saved yet"
    return (f"the last checkpoint is {ckpt_path} (iteration {stop.saved_iter}); continue "
            f"with `python train.py --out_dir={out_dir} --init_from=resume`")


# a stop or a machine error ends the run with that line (armed: after the step)
stop = process.on_ctrl_c(kept, lower="--batch_size (a larger --gradient_accumulation_steps "
                                     "keeps the batch per step) or --context_size")

# -----------------------------------------------------------------------------
# settings: the write-up's model (13 + 13 layers, 150 wide) and run (one A100, 9k steps)
out_dir = ""  # folder for ckpt.pt and log.jsonl; "" means out/<dataset>
dataset = "wikitext103"  # data/<dataset>/ (train.bin, val.bin, meta.json) or a task
batch_size = 50  # sequences per micro-batch
gradient_accumulation_steps = 16  # micro-batches per step, in all processes
max_iters = 9000  # optimizer steps of the whole run
learning_rate = 9e-4  # peak learning rate, reached at the end of the warmup
decay_lr = True  # linear warmup, then cosine decay to min_lr; False: constant
min_lr = 9e-5  # the learning rate at the end of the cosine decay
warmup_iters = 300  # steps of linear warmup
lr_decay_iters = 700000  # warmup plus cosine steps (the write-up's: past max_iters)
weight_decay = 0.1  # AdamW weight decay of matmul weights and embeddings
beta1 = 0.9  # AdamW beta1
beta2 = 0.95  # AdamW beta2
grad_clip = 1.0  # clip the gradient norm to this; 0 disables
eval_interval = 500  # steps between evaluations (and checkpoints)
eval_iters = 200  # batches per split an evaluation; 0: every val token once
log_interval = 10  # steps between progress lines
init_from = "scratch"  # scratch | resume (from out_dir/ckpt.pt)
overwrite = False  # True: a fresh run may replace out_dir's checkpoint and log
always_save_checkpoint = True  # False: save only when the val loss improves
seed = 1337  # random seed of the initial weights, batches and dropout
device = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:N | mps
dtype = "auto"  # auto (a GPU: bfloat16 or float16, else float32), or one of those
compile = False  # torch.compile the model (CUDA graphs on one GPU)
wandb_log = False  # log to Weights & Biases too (pip install wandb)
wandb_project = "ar-encoder-decoder"  # its Weights & Biases project
wandb_run_name = ""  # its run name; "" means out_dir
# each ModelConfig field a global; None: the variant's default (model.py)
globals().update(dict.fromkeys(ModelConfig.flags()))
# -----------------------------------------------------------------------------
# config: `python train.py [config/file.py ...] [--key=value ...]`, later ones win
defaults = {k: v for k, v in globals().items() if not k.startswith("_")
            and isinstance(v, (bool, int, float, str, type(None)))}
user_set = configure(globals(), defaults, sys.argv[1:], ModelConfig)
out_dir = out_dir or os.path.join("out", dataset)  # a folder per dataset
ckpt_path = os.path.join(out_dir, "ckpt.pt")
command = " ".join(["train.py", *sys.argv[1:]])  # who holds the folders
rank = int(os.environ.get("RANK", 0))  # this process among torchrun's (DDP)
world_size = int(os.environ.get("WORLD_SIZE", 1))  # and their number
master = rank == 0  # rank 0 writes
checkpoint = trained = None  # a resume's checkpoint, and the data it records
if init_from == "resume":  # the checkpoint's settings fill in those not set here
    checkpoint, restored = checkpoints.resume(out_dir, {"dataset": dataset, "seed": seed},
                                              user_set, command)
    restored = {k: v for k, v in restored.items() if k in defaults}  # settings still
    apply(globals(), defaults, restored.items(), f"{ckpt_path}'s train_config", ModelConfig)
    user_set |= restored.keys()
    trained = checkpoint["dataset_meta"]
    stop.saved_iter = checkpoint["iter_num"]  # on disk from the start: a stop names it
task = None  # a generated task: as the checkpoint records it, else by its name
if ("task" in trained) if trained is not None else is_task(dataset):
    # a task's DEFAULTS set its model and schedule, not where it writes
    run_settings = ("out_dir", "dataset", "init_from", "overwrite", "wandb_log")
    task = load_task(dataset, [k for k in defaults if k not in run_settings])
    own = {k: v for k, v in task.DEFAULTS.items() if k not in user_set}
    apply(globals(), defaults, own.items(), f"tasks/{dataset}.py's DEFAULTS", ModelConfig)
    if own:
        print(f"{dataset}: using its own defaults for "
              + ", ".join(f"{k}={v}" for k, v in own.items()))
# -----------------------------------------------------------------------------
# every setting's range, checked before anything is written
least = dict(batch_size=1, max_iters=0, warmup_iters=0, lr_decay_iters=0, eval_interval=1,
             log_interval=1)  # counts, at least
checks = {k: (globals()[k] >= n, f"use {n} or more") for k, n in least.items()}
checks |= {  # setting: (is the value allowed?, what to use instead)
    "init_from": (init_from in ("scratch", "resume"), "use scratch or resume"),
    "gradient_accumulation_steps": (  # a step's micro-batches, shared by the processes
        gradient_accumulation_steps in range(world_size, 2 ** 63, world_size),
        f"use {world_size} or a multiple of it: a micro-batch or more for each process"),
    "learning_rate": (0 < learning_rate < math.inf, "use a positive number, e.g. 1e-3"),
    "min_lr": (0 <= min_lr <= learning_rate, "use 0 or a number up to learning_rate"),
    "weight_decay": (0 <= weight_decay < math.inf, "use 0 or more, e.g. 0.1"),
    "beta1": (0 <= beta1 < 1, "use a number in [0, 1), e.g. 0.9"),
    "beta2": (0 <= beta2 < 1, "use a number in [0, 1), e.g. 0.95"),
    "grad_clip": (0 <= grad_clip < math.inf, "use a norm, e.g. 1.0, or 0: no clipping"),
    "eval_iters": (eval_iters >= bool(task), "use 1 or more" + (f" ({dataset} is a task: no "
                   "val.bin)" if task else ", or 0: every val token")),
    "seed": (0 <= seed < 2 ** 63, "use an integer from 0 to 2**63 - 1"),
    "dataset": (re.fullmatch(r"[\w.-]+", dataset), "name a data/ folder or a task"),
}
for key, (allowed, fix) in checks.items():
    if not allowed:
        process.fail(f"{key}={globals()[key]!r} is not allowed; {fix}")
try:  # the model's flags, checked by ModelConfig (vocab_size: the data's, below)
    config = ModelConfig(**{k: globals()[k] for k in ModelConfig.flags()
                            if globals()[k] is not None})
except ValueError as e:
    process.fail(str(e))
device, dtype = hardware.pick_device(device, dtype)
if dataset == "wikitext103" and not os.path.exists("data/wikitext103/meta.json"):
    introduce_run(build_model(config), batch_size, gradient_accumulation_steps, max_iters,
                  eval_iters, eval_interval, device)
train_config = {k: globals()[k] for k in defaults}  # saved in checkpoints
# -----------------------------------------------------------------------------
# processes and devices
if process.ddp:  # one process a device, each with its share of a step's micro-batches
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    if device.startswith("cuda"):
        device = f"cuda:{os.environ['LOCAL_RANK']}"
        torch.cuda.set_device(device)
my_micro_steps = list(range(rank, gradient_accumulation_steps, world_size))
device_type = device.split(":")[0]  # cuda, mps or cpu
ptdtype = getattr(torch, dtype)
autocast = torch.autocast(device_type, dtype=ptdtype) if dtype != "float32" else nullcontext()
# float16: the loss scaled up before backward, else gradients underflow
scaler = torch.amp.GradScaler(device_type, enabled=dtype == "float16")
torch.backends.cuda.matmul.allow_tf32 = True
# -----------------------------------------------------------------------------
# data: a task, or data/<dataset>; every batch fixed by (seed, iteration)
source, block, vocab_size, meta = open_dataset(  # vocab_size: a model flag
    dataset, task, config.context_size, vocab_size, command, trained)  # noqa: F821
batches = Batches(source, block, batch_size, gradient_accumulation_steps, seed, device)
# -----------------------------------------------------------------------------
# model, optimizer, the run's folder: a resume restores them from its checkpoint
config = dataclasses.replace(config, vocab_size=vocab_size)
torch.manual_seed(seed)  # the same initial weights in every process
raw_model = build_model(config).to(device)
optimizer = raw_model.configure_optimizer(weight_decay, learning_rate, (beta1, beta2),
                                          device_type)
iter_num, best_val_loss, tokens_seen, grad_norm, logged, wandb_run = checkpoints.start(
    checkpoint, raw_model, optimizer, scaler, train_config, command)
checkpoint = None  # free the memory
# no (B, T, vocab) logits where they would be large (model.logits_needed)
return_logits = logits_needed(config, device_type, batch_size * block)
model = raw_model
if compile:  # a failure: one line naming --compile=False (process.machine_error)
    # CUDA graphs on one GPU without accumulation only (PyTorch issue 96693)
    one_gpu_step = device_type == "cuda" and world_size == gradient_accumulation_steps == 1
    model = torch.compile(raw_model, mode="reduce-overhead" if one_gpu_step else None)
eval_model = model
if process.ddp:  # the gradients averaged over the processes
    model = torch.nn.parallel.DistributedDataParallel(model)
# each step's learning rate: get_lr (model.py)
schedule = dict(learning_rate=learning_rate, min_lr=min_lr, warmup_iters=warmup_iters,
                lr_decay_iters=lr_decay_iters, decay_lr=decay_lr)


@torch.no_grad()
def evaluation():
    """An evaluation's record: the mean losses of eval_iters fixed batches a split (0: every val
    token once), and more; None if a stop came (a resume evaluates the step)."""
    if stop.requested:
        return None
    _, tokens_per_sec, mfu = speed()  # of the steps before
    eval_model.eval()
    out = every_token_loss() if eval_iters == 0 else {}
    for split in ("train", "val") if eval_iters else ():
        with autocast:  # each batch's terms, {"ce", "embedding"}
            terms = [eval_model(*batches.eval(split, k), return_logits=return_logits)[2]
                     for k in range(eval_iters)]
        out[f"{split}_loss"] = sum(t["ce"].item() for t in terms) / eval_iters
        embedding = [t["embedding"].item() for t in terms if t["embedding"] is not None]
        out[f"{split}_embedding_loss"] = sum(embedding) / eval_iters if embedding else None
    out.update(raw_model.embedding_norms())
    if task is not None:
        out["val_accuracy"] = task.score(raw_model, "val", device)[0]
    eval_model.train()
    return {"iter": iter_num, "tokens": tokens_seen, **out, "lr": get_lr(iter_num, **schedule),
            "grad_norm": None if grad_norm is None else grad_norm.item(),
            **({"grad_scale": scaler.get_scale()} if scaler.is_enabled() else {}),
            "tokens_per_sec": tokens_per_sec, "mfu": mfu}


def every_token_loss():
    """Every val token, as many train windows; the embedding loss of a val batch."""
    out = split_losses(raw_model, source, block, batch_size, device, autocast)
    if config.embedding_loss != "none":
        with autocast:
            _, _, terms = eval_model(*batches.eval("val", 0), return_logits=return_logits)
        out["val_embedding_loss"] = terms["embedding"].item()
    return out


def speed():
    """(seconds a step, tokens/s, MFU) since the clock started; Nones if no step since."""
    if iter_num == clock_iter:
        return None, None, None
    hardware.sync(device)  # the steps queued on a GPU, done
    seconds = (time.time() - clock_start) / (iter_num - clock_iter)
    return seconds, tokens_per_iter / seconds, flops_per_iter / seconds / peak_flops


def save(record):
    """Log rank 0's evaluation record (or None), save a checkpoint of this step."""
    global best_val_loss
    improved = record is not None and record["val_loss"] < best_val_loss
    checkpoint = None
    if record is not None:
        best_val_loss = min(best_val_loss, record["val_loss"])
        logged.append(record)
    if master and (always_save_checkpoint or improved) and (record or stop.saved_iter != iter_num):
        checkpoint = {
            "model_config": dataclasses.asdict(config), "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
            "iter_num": iter_num,  # the data's position too (data.Batches)
            "tokens": tokens_seen, "best_val_loss": best_val_loss,
            "train_config": train_config, "wandb_run_id": wandb_run and wandb_run.id,
            "log": logged,  # a resume writes log.jsonl from it
            "dataset_meta": meta,  # a task, or text and its tokenizer
            "grad_norm": None if grad_norm is None else grad_norm.item(),
        }
    if checkpoints.save(out_dir, record, checkpoint, kept()):
        stop.saved_iter = iter_num
    if record is not None:
        accuracy = record.get("val_accuracy")  # a generated task's score
        accuracy = "" if accuracy is None else f", val accuracy {accuracy:.1%}"
        print(f"eval {iter_num}: train loss {record['train_loss']:.4f}, val loss "
              f"{record['val_loss']:.4f}{accuracy}", flush=True)
        if wandb_run:
            wandb_run.log({k: v for k, v in record.items() if v is not None}, iter_num)


tokens_per_iter = gradient_accumulation_steps * batch_size * block
flops_per_iter = raw_model.flops_per_token(block) * tokens_per_iter / world_size
# MFU: the model's FLOP/s over a matmul's timed here (a CPU has no datasheet peak)
cpu = device_type == "cpu"
peak_flops = hardware.matmul_peak(device, torch.float32 if cpu else ptdtype, 4096 >> 2 * cpu, 10)
if master:
    print(f"{config.variant}: {raw_model.num_params():,} parameters; {tokens_per_iter:,} tokens "
          f"per iteration ({world_size} process{'es' * (world_size > 1)}, {device}, {dtype}); "
          + (f"resuming at iteration {iter_num}" if init_from == "resume" else "from scratch"))
stop.armed = True  # a stop now saves the step it comes in
run_start = clock_start = time.time()  # the clock leaves evaluations out
clock_iter = iter_num
while True:
    lr = get_lr(iter_num, **schedule)
    for group in optimizer.param_groups:
        group["lr"] = lr
    evaluated = bool(logged) and logged[-1]["iter"] == iter_num  # on a resume
    if (iter_num % eval_interval == 0 or iter_num >= max_iters) and not evaluated:
        with process.stop_together():  # evaluation: rank 0's work
            record = evaluation() if master else None
        save(record)
        clock_start, clock_iter = time.time(), iter_num
    if process.all_sum(stop.requested):  # all processes stop, or none
        save(None)  # the step it came in
        raise KeyboardInterrupt  # one line, saying where the last checkpoint is
    if iter_num >= max_iters:
        break

    for micro_step in my_micro_steps:
        # dropout's masks, a step's only random draws: from (seed, it, micro_step)
        if config.dropout:
            torch.manual_seed(batches.dropout_seed(iter_num, micro_step))
        x, y = batches.train(iter_num, micro_step)
        # gradients are averaged over the processes only after the last micro-step
        last = micro_step == my_micro_steps[-1]
        with model.no_sync() if process.ddp and not last else nullcontext():
            with autocast:
                _, loss, terms = model(x, y, return_logits=return_logits)
            # the mean over the global batch, once DDP has averaged
            scaler.scale(loss / len(my_micro_steps)).backward()
    scaler.unscale_(optimizer)  # float16: the true gradients, to clip and log
    grad_norm = torch.nn.utils.clip_grad_norm_(  # the norm before clipping
        raw_model.parameters(), grad_clip or float("inf"))
    scaler.step(optimizer)  # float16: on an overflow, no step; the scale halves
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    tokens_seen += tokens_per_iter

    if iter_num % log_interval == 0:  # the only place the loop waits for the device
        checkpoints.check_finite(loss.item(), iter_num, out_dir)  # all stop, or none
    if master and iter_num % log_interval == 0:
        embedding = terms["embedding"]
        embedding = "" if embedding is None else f", embedding loss {embedding.item():.3e}"
        scale = f" (float16 grad scale {scaler.get_scale():.0f})" if scaler.is_enabled() else ""
        seconds, tokens_per_sec, mfu = speed()
        busy = " (above 100%: the CPU was busy while its peak was timed)" * (mfu > 1)
        eta = hardware.duration((max_iters - iter_num) * seconds)
        print(f"iter {iter_num}: loss {terms['ce'].item():.4f}{embedding}, grad norm "
              f"{grad_norm.item():.3f}{scale}, lr {lr:.2e}, {seconds * 1000:.0f} ms/iter, "
              f"{tokens_per_sec:,.0f} tokens/s, mfu {100 * mfu:.2f}%{busy}, ETA {eta}", flush=True)
if master:
    print(f"done: {iter_num} iterations in {time.time() - run_start:.1f}s; checkpoint "
          f"and log in {out_dir}/")
if process.ddp:  # every process waits for the last checkpoint, then all leave together
    dist.barrier()
    dist.destroy_process_group()
