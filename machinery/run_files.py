"""A run's folder: ckpt.pt (model, optimizer, settings, log so far) and log.jsonl (its records)."""
import io
import json
import math
import os

import torch

from machinery import distributed
from machinery.files import claim_folder, write_atomic
from machinery.process import fail


def start(checkpoint, model, optimizer, scaler, settings, meta, command):
    """Claim settings["out_dir"] (a fresh run refused where an earlier run is), start W&B, resume
    the checkpoint. Returns (iter_num, best_val_loss, tokens, grad_norm, the log, W&B run)."""
    out_dir = settings["out_dir"]
    master = int(os.environ.get("RANK", 0)) == 0
    if checkpoint is not None:  # against the model and the data (meta); a finished run ends here
        from machinery import checkpoints
        checkpoints.check_resume(checkpoint, model.config, settings, meta, master)
    run = None
    with distributed.stop_together():
        if master:  # one process at a time in out_dir (a resume holds it already)
            claim_folder(out_dir, command)
            earlier = [os.path.join(out_dir, name) for name in ("ckpt.pt", "log.jsonl")
                       if checkpoint is None and os.path.exists(os.path.join(out_dir, name))]
            if earlier and not settings["overwrite"]:  # a fresh run does not replace them
                from machinery.errors import refuse_overwrite
                refuse_overwrite(earlier[0])
            run = start_wandb(settings, checkpoint) if settings["wandb_log"] else None
            if checkpoint is not None:
                checkpoints.rebuild_log(out_dir, checkpoint)
            for path in earlier:  # --overwrite=True
                os.remove(path)
    if checkpoint is None:
        return 0, float("inf"), 0, None, [], run
    return *checkpoints.restore(checkpoint, model, optimizer, scaler, master), run


def save(out_dir, record, checkpoint, saved_iter, resume_command):
    """Append rank 0's evaluation record to log.jsonl and write its checkpoint (either may be None)
    or stop every process; returns, in every process, the iteration of the checkpoint on disk."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")

    def failed(path, error, size=None):  # one line: what is kept, and how to go on
        from machinery.file_errors import write_error
        kept, then = "no checkpoint was saved yet", "then start again"
        if saved_iter is not None:
            kept = f"the checkpoint {ckpt_path} (iteration {saved_iter}) is kept"
            then = f"continue with `{resume_command}`"
        fail(f"could not write {path}: {write_error(path, error, size)}; {kept}, {then}")
    with distributed.stop_together():
        if record is not None:
            losses = {k: v for k, v in record.items() if k.endswith("loss") and v is not None}
            if not all(map(math.isfinite, losses.values())):
                stop_non_finite(losses, record["iter"], ckpt_path)
            try:  # a line cut short by a full disk is dropped at the next resume
                with open(os.path.join(out_dir, "log.jsonl"), "a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as e:
                failed(os.path.join(out_dir, "log.jsonl"), e)
        if checkpoint is not None:
            checkpoint["rng"] = {"cpu": torch.get_rng_state(), "cuda": None, "mps": None}
            device_type = next(iter(checkpoint["model"].values())).device.type
            if device_type in ("cuda", "mps"):  # a resume draws as this run would
                checkpoint["rng"][device_type] = getattr(torch, device_type).get_rng_state()
            buffer = io.BytesIO()  # torch's zip writer turns a full disk into an unclear error
            torch.save(checkpoint, buffer)
            write_atomic(ckpt_path, buffer.getbuffer(), on_error=failed)
            saved_iter = checkpoint["iter_num"]
    master = int(os.environ.get("RANK", 0)) == 0  # rank 0's, told to every process
    saved = round(distributed.all_sum(saved_iter + 1 if master and saved_iter is not None else 0))
    return saved - 1 if saved else None


def check_finite(loss, iter_num, out_dir):
    """Stop every process, rank 0 with one line, where the loss of any is not finite."""
    loss = distributed.all_sum(loss)
    with distributed.stop_together():
        if int(os.environ.get("RANK", 0)) == 0 and not math.isfinite(loss):
            stop_non_finite({"loss": loss}, iter_num, os.path.join(out_dir, "ckpt.pt"))


def stop_non_finite(losses, iter_num, ckpt_path):
    what = ", ".join(f"{k}={v}" for k, v in losses.items() if not math.isfinite(v))
    fail(f"non-finite {what} at iteration {iter_num}: stopped; the last good checkpoint "
         f"{ckpt_path} is kept. Lower --learning_rate or raise --warmup_iters")


def start_wandb(settings, checkpoint):
    """Weights & Biases, imported only when asked for: start (or, with the run id a checkpoint
    saved, go on in) its run."""
    try:
        import wandb
    except ImportError:
        fail("wandb_log=True needs Weights & Biases, which is not installed: pip install wandb, "
             "or train without it: --wandb_log=False")
    run_id = checkpoint.get("wandb_run_id") if checkpoint else None
    try:
        run = wandb.init(project=settings["wandb_project"],
                         name=settings["wandb_run_name"] or settings["out_dir"], id=run_id,
                         resume="allow")
        run.config.update(settings, allow_val_change=True)  # a resume may change some
    except Exception as e:  # no API key, no network
        detail = (str(e).strip() or "?").splitlines()[0]
        fail(f"W&B could not start ({type(e).__name__}: {detail}); log in with `wandb login`, log "
             f"offline with WANDB_MODE=offline, or train without it: --wandb_log=False")
    return run  # its id is saved in the checkpoints: a resume goes on in this W&B run
