"""A run's folder: ckpt.pt, its record (weights, optimizer, settings, data, log), checked
once, on load; log.jsonl, written from the checkpoint's log."""
import io
import json
import math
import os
import sys
import zipfile
from pathlib import Path

import torch

from machinery.files import hold_folder, make_folder, write_atomic
from machinery.process import MASTER, all_sum, fail, stop_together

# what a checkpoint holds, and of what kind: checked as it is read
NEEDED = {"model": dict, "model_config": dict, "train_config": dict, "dataset_meta": dict,
          "optimizer": dict, "scaler": dict, "iter_num": int, "best_val_loss": float,
          "tokens": int, "log": list, "grad_norm": (float, type(None))}


def read_checkpoint(ckpt_path, device, fix):
    """The checkpoint at ckpt_path, with all this code needs, or one line."""
    if not os.path.isfile(ckpt_path):
        fail(f"no checkpoint at {ckpt_path}; train one with train.py --out_dir="
             f"{os.path.dirname(ckpt_path)}, or point --out_dir at a run's folder")
    try:
        # a zip file; torch.load does not check the CRC-32 of its records
        with zipfile.ZipFile(ckpt_path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        damaged = None  # not a zip: torch.load says it cannot read it
    if damaged:
        fail(f"checkpoint {ckpt_path} is damaged: its record {damaged} fails its CRC-32 "
             f"check (a disk or copy error); {fix}")
    try:  # weights_only: loading runs no code
        checkpoint = torch.load(ckpt_path, map_location=device, weights_only=True)
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); {fix}")
    if not isinstance(checkpoint, dict):
        checkpoint = {}
    wrong = [key for key, kind in NEEDED.items()
             if not isinstance(checkpoint.get(key), kind) or type(checkpoint.get(key)) is bool]
    if not wrong:  # the record as the scripts read it
        c = checkpoint
        meta, dataset = c["dataset_meta"], c["train_config"].get("dataset")
        known = meta.get("tokenizer") in ("gpt2", "byte")  # text.py checks the rest
        wrong = [key for key, right in [
            ("log", all(type(r) is dict and type(r.get("iter")) is int for r in c["log"])),
            ("train_config", type(dataset) is str),
            ("dataset_meta", meta.get("task") == dataset if "task" in meta else known),
            ("record", plain([c["model_config"], c["train_config"], meta, c["log"]]))]
            if not right][:1]
    if wrong:
        fail(f"checkpoint {ckpt_path} has no {', '.join(wrong)} of the kind this code "
             f"reads (it is not train.py's, or an older version wrote it); {fix}")
    return checkpoint


def plain(value):  # JSON's kinds only, as log.jsonl and meta.json hold them
    try:
        return bool(json.dumps(value))
    except (TypeError, ValueError):
        return False


def load_checkpoint(out_dir, device="cpu", fix="use another run's --out_dir", build=None):
    """out_dir's checkpoint and its model, build(model_config), in eval mode."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    checkpoint = read_checkpoint(ckpt_path, device, fix)
    try:
        model = build(checkpoint["model_config"])
        model.load_state_dict(checkpoint["model"])
    except Exception as e:
        # e.g. a model_config key model.py lacks: TypeError
        fail(f"checkpoint {ckpt_path} does not fit this model.py ({type(e).__name__}: "
             f"{str(e).splitlines()[0][:200]}); {fix}")
    return checkpoint, model.to(device).eval()


def resume(out_dir, asked, user_set, command):
    """The checkpoint a run resumes, and the settings it restores."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    # held before it is read: else a second run repeats its steps
    if MASTER and os.path.isfile(ckpt_path):
        hold_folder(out_dir, "--out_dir", command)
    fix = "restore a good copy or train from scratch in a new --out_dir"
    checkpoint = read_checkpoint(ckpt_path, "cpu", fix)
    saved = checkpoint["train_config"]
    # the seed draws the batches: a new one breaks the curves
    for key in ("dataset", "seed"):
        if key in user_set and asked[key] != saved.get(key):
            fail(f"{ckpt_path} was trained with {key}={saved.get(key)!r}, not "
                 f"{asked[key]!r}; drop --{key} to resume it")
    restored = {k: v for k, v in saved.items()
                if k not in user_set | {"out_dir", "init_from", "overwrite"}}
    return checkpoint, restored


def start(checkpoint, model, optimizer, scaler, settings, command):
    """Claim out_dir, start W&B, restore the checkpoint: (iter_num, ..., run)."""
    out_dir = settings["out_dir"]
    state = 0, float("inf"), 0, None, []
    if checkpoint is not None:  # the same model; a finished run ends
        check_resume(checkpoint, model.config, settings)
        state = restore(checkpoint, model, optimizer, scaler)
    run = None
    with stop_together():
        if MASTER:  # one process at a time in out_dir (a resume holds it)
            make_folder(out_dir)
            hold_folder(out_dir, "--out_dir", command)
            names = ("ckpt.pt", "log.jsonl") if checkpoint is None else ()
            earlier = [n for n in names if os.path.lexists(os.path.join(out_dir, n))]
            if earlier and not settings["overwrite"]:  # a fresh run keeps them
                go_on = "go on with --init_from=resume, " * (earlier[0] == "ckpt.pt")
                fail(f"{out_dir} holds an earlier run's {earlier[0]}; {go_on}use "
                     "another --out_dir, or replace it: --overwrite=True")
            run = start_wandb(settings, checkpoint) if settings["wandb_log"] else None
            if checkpoint or "log.jsonl" in earlier:  # --overwrite: set aside
                write_log(out_dir, checkpoint["log"] if checkpoint else [])
    return *state, run


def check_resume(checkpoint, config, settings):
    """Stop if the model asked for is not the checkpoint's, or it is finished."""
    ckpt_path = os.path.join(settings["out_dir"], "ckpt.pt")
    saved = checkpoint["model_config"]
    unknown = [k for k in saved if type(k) is not str or not hasattr(config, k)]
    if unknown:
        fail(f"{ckpt_path} is from another version of model.py (its model_config has "
             f"{', '.join(map(str, unknown))}); resume it with that version")
    diffs = [k for k, v in saved.items() if getattr(config, k) != v]
    if diffs:
        asked = ", ".join(f"{k}={getattr(config, k)!r}" for k in diffs)
        fail(f"{ckpt_path} was trained with {', '.join(f'{k}={saved[k]!r}' for k in diffs)}"
             f", but this run asks for {asked}; drop those flags to resume (vocab_size: "
             f"the dataset's, as prepared)")
    iter_num, logged = checkpoint["iter_num"], checkpoint["log"]
    if iter_num >= settings["max_iters"] and logged and logged[-1]["iter"] == iter_num:
        if MASTER:
            print(f"{settings['out_dir']} holds a finished run: {iter_num} of max_iters="
                  f"{settings['max_iters']} iterations, evaluated; to go on, resume with a "
                  f"larger --max_iters, e.g. --max_iters={2 * iter_num or 100}")
        sys.exit(0)


def write_log(out_dir, log):
    """log.jsonl as this run's log; one that differs is set aside whole."""
    path = os.path.join(out_dir, "log.jsonl")
    text = "".join(json.dumps(record) + "\n" for record in log).encode()
    if os.path.isfile(path) and Path(path).read_bytes() == text:
        return
    # whole before the old moves: a full disk changes nothing
    new = f"{path}.new"
    write_atomic(new, text, f"; the other files of {out_dir} are as they were")
    if os.path.lexists(path):
        aside = next(f"{path}.aside{n}" for n in range(1, 10 ** 6)
                     if not os.path.lexists(f"{path}.aside{n}"))
        os.rename(path, aside)
        print(f"{path}: set aside whole as {aside}; it differs from this run's log")
    os.replace(new, path)


def restore(checkpoint, model, optimizer, scaler):
    """Load the weights, optimizer and scale, or one line. (No random state: every draw
    of a step comes from the seed and the iteration, data.Batches.)"""
    try:  # weights of another shape or model
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        if scaler.is_enabled() and checkpoint["scaler"]:  # float16 resumed exactly
            scaler.load_state_dict(checkpoint["scaler"])
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError) as e:
        detail = (str(e).strip() or "?").splitlines()[0][:200]
        fail(f"the checkpoint's weights or state do not fit this run ({type(e).__name__}: "
             f"{detail}); restore a good copy or train from scratch in a new --out_dir")
    grad_norm = checkpoint.get("grad_norm")  # of the step before, to log
    return (checkpoint["iter_num"], checkpoint["best_val_loss"], checkpoint["tokens"],
            None if grad_norm is None else torch.tensor(grad_norm), checkpoint["log"])


def save(out_dir, record, checkpoint, kept):
    """Log rank 0's record, write its checkpoint (either may be None): was one written?"""
    with stop_together():
        if record is not None:
            losses = {k: v for k, v in record.items() if k.endswith("loss") and v is not None}
            stop_non_finite(losses, record["iter"], out_dir)
            try:  # a line cut short (full disk): a resume sets the log aside
                with open(os.path.join(out_dir, "log.jsonl"), "a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as e:
                fail(f"could not write {out_dir}/log.jsonl ({e.strerror}); {kept}")
        if checkpoint is not None:
            buffer = io.BytesIO()  # torch's zip writer garbles a full disk error
            torch.save(checkpoint, buffer)
            write_atomic(os.path.join(out_dir, "ckpt.pt"), buffer.getbuffer(), f"; {kept}")
    return bool(all_sum(MASTER and checkpoint is not None))


def check_finite(loss, iter_num, out_dir):
    """Stop every process, rank 0 with one line, if a loss is not finite."""
    loss = all_sum(loss)
    with stop_together():
        if MASTER:
            stop_non_finite({"loss": loss}, iter_num, out_dir)


def stop_non_finite(losses, iter_num, out_dir):  # a loss not finite: one line
    what = ", ".join(f"{k}={v}" for k, v in losses.items() if not math.isfinite(v))
    if what:
        fail(f"non-finite {what} at iteration {iter_num}: stopped; the last good "
             f"checkpoint {os.path.join(out_dir, 'ckpt.pt')} is kept. Lower "
             "--learning_rate or raise --warmup_iters")


def start_wandb(settings, checkpoint):
    """Start a Weights & Biases run, or go on in the checkpoint's."""
    try:
        import wandb
    except ImportError:
        fail("wandb_log=True needs Weights & Biases: pip install wandb, or --wandb_log=False")
    try:
        run = wandb.init(project=settings["wandb_project"], resume="allow",
                         name=settings["wandb_run_name"] or settings["out_dir"],
                         id=checkpoint and checkpoint.get("wandb_run_id"))
        # a resume may change them
        run.config.update(settings, allow_val_change=True)
    except Exception as e:  # no API key, no network
        detail = (str(e).strip() or "?").splitlines()[0][:200]
        fail(f"W&B could not start ({type(e).__name__}: {detail}); log in (`wandb login`), "
             "or WANDB_MODE=offline, or --wandb_log=False")
    return run  # its id, saved in checkpoints: a resume goes on in it
