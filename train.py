"""
Train the auto-regressive encoder-decoder transformer of "Auto-regressive Encoder-Decoder
Transformer" (Yan, 2024), its earlier draft's parallel one, or the decoder-only baseline.

    python train.py --dataset=reversal          # zero-setup demo: a small model reverses digits
    python train.py config/cpu_baseline.py      # a config file; --key=value after it overrides it
    python train.py --help                      # every setting, its default and what it means
    torchrun --standalone --nproc_per_node=8 train.py config/paper_baseline.py   # DDP

A step's sequences depend on (seed, iteration) alone (data.Batches): a resumed run logs an
unbroken run's losses; a step split into other micro-batches, the same gradients (evaluation
batches: batch_size sequences, so other ones).
"""
import dataclasses
import math
import os
import re
import sys
import time
from contextlib import nullcontext

import torch

from configurator import configure
from data import Batches, generated_task, open_dataset
from evaluate import split_losses
from machinery import distributed, files, hardware, run_files
from machinery.process import StopAfterStep, fail, script_start, train_stop_hook
from model import ModelConfig, build_model, get_lr, logits_needed


sys.excepthook = train_stop_hook(globals())  # one line, never a traceback
script_start()
# -----------------------------------------------------------------------------
# settings; the defaults train the write-up's model (13 + 13 layers, 150 wide) as its appendix runs
# did (one A100, 9k steps); a generated task of tasks/ has its own small model and schedule
out_dir = ""  # folder for ckpt.pt and log.jsonl; "" means out/<dataset>
dataset = "wikipedia"  # data/<dataset>/{train,val}.bin and meta.json, or a task of tasks/
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
overwrite = False  # True: a run from scratch may replace the checkpoint and log in out_dir
always_save_checkpoint = True  # False: save only when the val loss improves
seed = 1337  # random seed of the initial weights, batches and dropout
device = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:N | mps
dtype = "auto"  # auto (GPU: bfloat16, or float16 where it has none; else float32), or one of them
compile = False  # torch.compile the model (on one GPU, one micro-batch a step: as CUDA graphs)
wandb_log = False  # also log to Weights & Biases (pip install wandb; offline: WANDB_MODE=offline)
wandb_project = "ar-encoder-decoder"  # its Weights & Biases project
wandb_run_name = ""  # its run name; "" means out_dir
# every ModelConfig field is a global of the same name; None keeps the variant's default (model.py)
globals().update(dict.fromkeys(ModelConfig.flags()))
# -----------------------------------------------------------------------------
# config: `python train.py [config/file.py ...] [--key=value ...]`, later ones win
defaults = {k: v for k, v in globals().items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))}
user_set = configure(globals(), defaults, sys.argv[1:], ModelConfig,
                     epilog="\nA generated task, such as --dataset=reversal, uses its own small "
                            "model and schedule for the settings not given (its module's DEFAULTS, "
                            "in tasks/).")
out_dir = out_dir or os.path.join("out", dataset)  # each dataset its own folder
ckpt_path = os.path.join(out_dir, "ckpt.pt")
log_path = os.path.join(out_dir, "log.jsonl")
resume_command = f"python train.py --out_dir={out_dir} --init_from=resume"
master = int(os.environ.get("RANK", 0)) == 0  # rank 0 of torchrun writes
checkpoint = None
saved_iter = None  # the iteration of the checkpoint in out_dir
restored = {}  # the settings a resume takes from its checkpoint
logged = []  # the run's log records, which its checkpoints carry
if init_from == "resume":  # the checkpoint's settings fill in every key not set here
    asked = {"dataset": dataset, "seed": seed}
    checkpoint, restored, logged = run_files.resume(out_dir, asked, user_set, master)
    globals().update(restored)
    user_set |= restored.keys()
task = generated_task(dataset)
if task is not None:  # a generated task: its own small model and short schedule
    own = {k: v for k, v in task.DEFAULTS.items() if k not in user_set}
    globals().update(own)
    if own:
        print(f"{dataset}: using its own defaults for "
              + ", ".join(f"{k}={v}" for k, v in own.items()))
# -----------------------------------------------------------------------------
# checks: every setting's range, before anything is written; one line naming the setting and the fix
checks = {  # setting: (is the value allowed?, what to use instead)
    "init_from": (init_from in ("scratch", "resume"),
                  "use --init_from=scratch or --init_from=resume"),
    "batch_size": (batch_size >= 1, "use a positive number of sequences"),
    "gradient_accumulation_steps": (gradient_accumulation_steps >= 1,
                                    "use a positive number of micro-batches"),
    "max_iters": (max_iters >= 0, "use 0 or more steps"),
    "learning_rate": (0 < learning_rate < math.inf, "use a positive number, e.g. 1e-3"),
    "min_lr": (0 <= min_lr <= learning_rate, "use 0 or a positive number up to learning_rate"),
    "warmup_iters": (warmup_iters >= 0, "use 0 or more steps"),
    "lr_decay_iters": (lr_decay_iters >= 0, "use 0 or more steps"),
    "weight_decay": (0 <= weight_decay < math.inf, "use 0 or a positive number, e.g. 0.1"),
    "beta1": (0 <= beta1 < 1, "use a number in [0, 1), e.g. 0.9"),
    "beta2": (0 <= beta2 < 1, "use a number in [0, 1), e.g. 0.95"),
    "grad_clip": (0 <= grad_clip < math.inf,
                  "use a positive gradient norm, e.g. 1.0, or 0 for no clipping"),
    "eval_interval": (eval_interval >= 1, "use a positive number of steps"),
    "eval_iters": (eval_iters >= (task is not None),
                   f"use a positive number of batches ({dataset} is a generated task: no val.bin)"
                   if task else "use a positive number of batches, or 0 for every val token"),
    "log_interval": (log_interval >= 1, "use a positive number of steps"),
    "seed": (0 <= seed < 2 ** 63, "use an integer from 0 to 2**63 - 1"),
    "dataset": (re.fullmatch(r"[\w.-]+", dataset) is not None,
                "give a folder name of data/, or a task of tasks/"),
}
for key, (allowed, fix) in checks.items():
    if not allowed:
        fail(f"{key}={globals()[key]!r} is not allowed; {fix}")
restored_device = {"device", "dtype"} & restored.keys()
device, dtype = hardware.pick_device(device, dtype, ckpt_path if restored_device else None)
train_config = {k: globals()[k] for k in defaults}  # saved in checkpoints
if checkpoint is not None:  # a finished run ends here; one resumed otherwise says what changed
    run_files.exit_if_finished(checkpoint, max_iters, logged, out_dir, master)
    run_files.note_changes(checkpoint, train_config, master)
hardware.pick_threads(device)
if init_from == "scratch" and not overwrite:
    run_files.check_fresh(out_dir)
if wandb_log and master:  # imported only when asked; its run starts once every check has passed
    wandb = run_files.import_wandb()
# -----------------------------------------------------------------------------
# processes and devices
rank, world_size, device = distributed.start(device)
distributed.check_split(batch_size, gradient_accumulation_steps, world_size)
my_micro_steps = list(range(rank, gradient_accumulation_steps, world_size))  # r, r + W, ...
device_type = device.split(":")[0]  # cuda, mps or cpu
ptdtype = getattr(torch, dtype)
autocast = torch.autocast(device_type, dtype=ptdtype) if dtype != "float32" else nullcontext()
# float16 gradients underflow: the loss is scaled up before backward, and a step with inf / NaN
# gradients is skipped
scaler = torch.amp.GradScaler(device_type, enabled=dtype == "float16")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
# -----------------------------------------------------------------------------
# data: a generated task, or data/<dataset>; every batch fixed by (seed, iteration)
command = " ".join(["train.py", *sys.argv[1:]])
source, block, vocab_size, meta = open_dataset(  # context_size, vocab_size: ModelConfig flags
    dataset, context_size or ModelConfig.context_size, vocab_size, command)  # noqa: F821
if checkpoint is not None and task is None:  # the same tokens and text as the run so far
    run_files.check_same_data(checkpoint, meta, dataset, training=True)
batches = Batches(source, block, batch_size, gradient_accumulation_steps, seed, device)
with distributed.stop_together():
    if master:  # one process at a time in out_dir
        files.claim_folder(out_dir, command, hold=init_from == "scratch")  # resume: held
# -----------------------------------------------------------------------------
# model, optimizer, checkpoint
try:
    config = ModelConfig(**{k: globals()[k] for k in ModelConfig.flags()
                            if globals()[k] is not None})
except ValueError as e:
    fail(e)
iter_num = 0
best_val_loss = float("inf")
tokens_seen = 0
grad_norm = None  # of the last step, logged at the next evaluation
wandb_run_id = None
if checkpoint is not None:
    run_files.check_resumable(checkpoint, config, ckpt_path, dataset)
    iter_num = checkpoint["iter_num"]
    saved_iter = iter_num
    best_val_loss = checkpoint["best_val_loss"]
    wandb_run_id = checkpoint.get("wandb_run_id")  # a resumed run goes on in its W&B run
    tokens_seen = run_files.tokens_trained(checkpoint)
    grad_norm = run_files.saved_grad_norm(checkpoint)
torch.manual_seed(seed)  # the same initial weights in every process
raw_model = build_model(config).to(device)
optimizer = raw_model.configure_optimizer(weight_decay, learning_rate, (beta1, beta2), device_type)
if checkpoint is not None:
    run_files.restore(checkpoint, raw_model, optimizer, scaler, device_type)
    checkpoint = None  # free the memory
# the loss without the (B, T, vocab) logits where they would be large (model.logits_needed)
return_logits = logits_needed(config, device_type, batch_size * block)
model = raw_model
if compile:  # as CUDA graphs on one GPU without accumulation (see hardware.compile_model)
    cuda_graphs = device_type == "cuda" and not distributed.ddp and gradient_accumulation_steps == 1
    model = hardware.compile_model(raw_model, cuda_graphs, batches.train(0, 0), autocast,
                                   return_logits, distributed.all_sum, master)
eval_model = model
model = distributed.wrap(model, device_type)


# the learning rate of each step: get_lr in model.py, beside the optimizer's settings
schedule = dict(learning_rate=learning_rate, min_lr=min_lr, warmup_iters=warmup_iters,
                lr_decay_iters=lr_decay_iters, decay_lr=decay_lr)


stop_write_failed = run_files.write_failed(globals())  # one line: what is kept, how to go on


@torch.no_grad()
def estimate_loss():
    """Mean cross-entropy and embedding loss over eval_iters fixed batches per split, in eval mode
    (no dropout); eval_iters=0: every val token once, and as many train windows (split_losses)."""
    eval_model.eval()
    out = {}
    if eval_iters == 0:
        out.update(split_losses(raw_model, source, block, batch_size, device, autocast))
        if config.embedding_loss != "none":  # on one batch: not a per-token figure
            with autocast:
                _, _, terms = eval_model(*batches.eval("val", 0), return_logits=return_logits)
            out["val_embedding_loss"] = terms["embedding"].item()
    else:
        for split in ("train", "val"):
            ce = []
            embedding = []
            for k in range(eval_iters):
                with autocast:
                    _, _, terms = eval_model(*batches.eval(split, k), return_logits=return_logits)
                ce.append(terms["ce"].item())
                embedding.append(None if terms["embedding"] is None else terms["embedding"].item())
            out[f"{split}_loss"] = sum(ce) / len(ce)
            out[f"{split}_embedding_loss"] = None
            if embedding[0] is not None:
                out[f"{split}_embedding_loss"] = sum(embedding) / len(embedding)
    out.update(raw_model.embedding_norms())
    if task is not None:
        out["val_accuracy"] = task.score(raw_model, "val", device)[0]
    eval_model.train()
    return out


def evaluation():
    """An evaluation's record: its losses, then the last steps' lr, gradient norm and speed."""
    speed = meter.interval_speed
    record = {"iter": iter_num, "tokens": tokens_seen, **estimate_loss(),
              "lr": get_lr(iter_num, **schedule),
              "grad_norm": None if grad_norm is None else grad_norm.item(),  # inf: a step skipped
              **({"grad_scale": scaler.get_scale()} if scaler.is_enabled() else {}),
              "tokens_per_sec": speed, "mfu": speed and meter.mfu(speed)}
    bad = [f"{k}={v}" for k, v in record.items()
           if k.endswith("loss") and v is not None and not math.isfinite(v)]
    if bad:
        stop_non_finite(", ".join(bad))
    return record


def save_checkpoint():
    global saved_iter
    checkpoint = {
        "model_config": dataclasses.asdict(config), "model": raw_model.state_dict(),
        "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
        "iter_num": iter_num,  # also the data position: batches are a function of (seed, iteration)
        "tokens": tokens_seen, "best_val_loss": best_val_loss, "train_config": train_config,
        "wandb_run_id": wandb_run_id,
        "log": logged,  # a resume checks that the log is this run's, and rebuilds a lost one
        "dataset_meta": meta,  # sample.py checks that data/<dataset>/meta.json has this tokenizer
        "rng": run_files.rng_states(device_type),
        "grad_norm": None if grad_norm is None else grad_norm.item(),  # for a resume mid-interval
    }
    run_files.write_checkpoint(ckpt_path, checkpoint, on_error=stop_write_failed)
    saved_iter = iter_num


def log_and_save(record):
    """Append the evaluation's record to the log; save a checkpoint (always, or when the val loss
    improves)."""
    global best_val_loss
    accuracy = f", val accuracy {record['val_accuracy']:.1%}" if "val_accuracy" in record else ""
    print(f"eval {iter_num}: train loss {record['train_loss']:.4f}, val loss "
          f"{record['val_loss']:.4f}{accuracy}", flush=True)
    run_files.append_log(log_path, record, on_error=stop_write_failed)
    logged.append(record)
    if wandb_log:
        wandb.log({k: v for k, v in record.items() if v is not None}, step=iter_num)
    if always_save_checkpoint or record["val_loss"] < best_val_loss:
        best_val_loss = min(best_val_loss, record["val_loss"])
        save_checkpoint()


def stop_non_finite(what):
    fail(f"non-finite {what} at iteration {iter_num}: stopped; the last good checkpoint "
         f"{ckpt_path} is kept. Lower --learning_rate or raise --warmup_iters")


def stop_saving():
    """A stop after a finished step: save it (always_save_checkpoint=False: the best so far stays),
    then end as Ctrl-C does, with the one line saying where the last checkpoint is."""
    with distributed.stop_together():
        if master and always_save_checkpoint:
            save_checkpoint()
    raise KeyboardInterrupt


tokens_per_iter = gradient_accumulation_steps * batch_size * block
meter = hardware.Meter(raw_model.flops_per_token(block), tokens_per_iter, max_iters, eval_interval,
                       device, ptdtype, world_size)
with distributed.stop_together():
    if master:
        if wandb_log:  # now that every check has passed: a run stopped by its checks leaves none
            wandb_run_id = run_files.start_wandb(wandb, wandb_project, wandb_run_name or out_dir,
                                                 wandb_run_id, train_config)
        run_files.start_log(out_dir, logged, iter_num, init_from == "resume", stop_write_failed)
        processes = f"{world_size} process{'es' * (world_size > 1)}"
        print(f"{config.variant}: {raw_model.num_params():,} parameters; {tokens_per_iter:,} "
              f"tokens per iteration ({processes}, {device}, {dtype}); "
              + (f"resuming at iteration {iter_num}" if init_from == "resume" else "from scratch"))
        # early, before a long first evaluation: how long the run will take
        meter.estimate(raw_model, batches, autocast, return_logits, eval_iters, source,
                       len(my_micro_steps), iter_num, init_from == "resume")
stop = StopAfterStep(meter.step_seconds)  # from here, a stop saves the step it comes in
run_start = time.time()
meter.restart()
while True:
    lr = get_lr(iter_num, **schedule)
    for group in optimizer.param_groups:
        group["lr"] = lr
    logged_here = bool(logged) and logged[-1]["iter"] == iter_num  # a resume's checkpoint's
    if (iter_num % eval_interval == 0 or iter_num >= max_iters) and not logged_here:
        with distributed.stop_together():  # evaluation, log and checkpoint: rank 0's work
            if master:
                meter.evaluation_starts(iter_num)
                record = evaluation()
                meter.evaluation_ends()
                log_and_save(record)
        meter.restart()
    if iter_num >= max_iters:
        break

    for micro_step in my_micro_steps:
        # dropout's masks, a step's only random draws, from (seed, it, micro_step) alone
        if config.dropout:
            torch.manual_seed(batches.dropout_seed(iter_num, micro_step))
        x, y = batches.train(iter_num, micro_step)
        # gradients are all-reduced (averaged over processes) only after the last micro-step
        last = micro_step == my_micro_steps[-1]
        with model.no_sync() if distributed.ddp and not last else nullcontext():
            with autocast:
                _, loss, terms = model(x, y, return_logits=return_logits)
            # the mean over the global batch, once DDP has averaged
            scaler.scale(loss / len(my_micro_steps)).backward()
    scaler.unscale_(optimizer)  # float16: the true gradients again, for clipping and the log
    # the norm before clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), grad_clip or float("inf"))
    scaler.step(optimizer)  # float16: no step where a gradient overflowed; the scale halves instead
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    meter.tokens += tokens_per_iter
    tokens_seen += tokens_per_iter

    if distributed.any_of(stop.requested):  # every process stops after the same step, or none
        stop_saving()
    if iter_num % log_interval == 0:  # the only place the loop waits for the device
        loss_sum = distributed.all_sum(loss.item())  # over the processes: all stop, or none
        with distributed.stop_together():
            if master and not math.isfinite(loss_sum):
                stop_non_finite(f"loss={loss_sum / world_size}")
    if master and (meter.due(iter_num) or iter_num % log_interval == 0):
        embedding = ""
        if terms["embedding"] is not None:
            embedding = f", embedding loss {terms['embedding'].item():.3e}"
        scale = f" (float16 grad scale {scaler.get_scale():.0f})" if scaler.is_enabled() else ""
        print(f"iter {iter_num}: loss {terms['ce'].item():.4f}{embedding}, grad norm "
              f"{grad_norm.item():.3f}{scale}, lr {lr:.2e}, {meter.progress(iter_num)}", flush=True)
if master:
    print(f"done: {iter_num} iterations in {time.time() - run_start:.1f}s; checkpoint and "
          f"log in {out_dir}/")
distributed.finish()
