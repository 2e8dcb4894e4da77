"""
A run's folder, <out_dir>: its checkpoint and its log, and the checks that they belong together and
to the data a model was trained on.

    ckpt.pt     model_config, model, optimizer, scaler, iter_num, tokens, best_val_loss,
                train_config, grad_norm,
                wandb_run_id, dataset_meta (the tokenizer record), rng, log (the records its run
                logged, up to iter_num)
    log.jsonl   one JSON record per evaluation
"""
import dataclasses
import io
import json
import os
import sys
import zipfile

import torch

from data import prepare_hint, read_meta
from machinery.files import hold_folder, write_atomic, write_error
from machinery.process import fail
from model import ModelConfig, build_model


def load_checkpoint(out_dir, device="cpu", fix="use another run's --out_dir"):
    """(checkpoint dict, model with its weights, in eval mode) of out_dir/ckpt.pt, or one line
    saying what is wrong."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path}; train one with train.py --out_dir={out_dir}, "
             f"or point --out_dir at a run's folder")
    damaged = damaged_record(ckpt_path)
    if damaged:
        fail(f"checkpoint {ckpt_path} is damaged: its record {damaged} fails its CRC-32 check (a "
             f"disk or copy error); {fix}")
    try:
        checkpoint = torch.load(ckpt_path, map_location=device, weights_only=True)  # no code run
        model = build_model(ModelConfig(**checkpoint["model_config"]))
        model.load_state_dict(checkpoint["model"])
        checkpoint["train_config"]["dataset"]  # every reader needs it
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); {fix}")
    return checkpoint, model.to(device).eval()


def damaged_record(path):
    """The first record of the checkpoint (a zip file) whose bytes fail their CRC-32, which
    torch.load does not check; None where all are whole or the file is no zip (torch.load then says
    it cannot read it)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return None


def write_failed(run):
    """train.py's answer to a failed write, most often a full disk: one line saying what is kept
    (what was written before is) and how to go on. run: train.py's globals, read when it fails."""
    def stop(path, error, size=None):
        saved = run["saved_iter"]
        kept = "no checkpoint was saved yet"
        then = "then start again"
        if saved is not None:
            kept = f"the checkpoint {run['ckpt_path']} (iteration {saved}) is kept"
            then = f"continue with `{run['resume_command']}`"
        fail(f"could not write {path}: {write_error(path, error, size)}; {kept}, {then}")
    return stop


def write_checkpoint(path, checkpoint, on_error=None):
    """torch.save, in memory first (torch's zip writer turns a full disk into an unclear error),
    then written whole by write_atomic."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    write_atomic(path, buffer.getbuffer(), on_error=on_error)


def check_fresh(out_dir):
    """A run from scratch must not replace a trained model or an earlier run's log without
    --overwrite=True."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    log_path = os.path.join(out_dir, "log.jsonl")
    if os.path.exists(ckpt_path):
        fail(f"{ckpt_path} already holds a trained model; continue it with --init_from=resume, "
             f"train in another --out_dir, or replace it with --overwrite=True")
    # a log without its checkpoint, such as a study's committed results
    if os.path.exists(log_path):
        fail(f"{log_path} holds the log of an earlier run; train in another --out_dir, or replace "
             f"it with --overwrite=True")


def resume(out_dir, asked, user_set, master):
    """The checkpoint a resumed run goes on from, the settings it restores (every one not set on the
    command line or in a config file), and the records its run logged. asked: the dataset and seed
    the run was given."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path} to resume from; train with --init_from=scratch "
             f"first, or set --out_dir")
    if master:  # before reading the checkpoint: a second process resuming it would repeat its steps
        hold_folder(out_dir, "--out_dir")
    checkpoint = load_checkpoint(out_dir, fix="restore a good copy or train from scratch in a new "
                                              "--out_dir")[0]
    # and not another run's checkpoint, put in its folder
    logged = checkpoint_log(os.path.join(out_dir, "log.jsonl"), checkpoint, ckpt_path)
    saved = checkpoint["train_config"]
    # the seed draws the batches and the evaluation batches: a new one breaks the curves
    for key in ("dataset", "seed"):
        if key in user_set and asked[key] != saved[key]:
            fail(f"{ckpt_path} was trained with {key}={saved[key]!r}, not {asked[key]!r}; "
                 f"drop --{key} to resume it")
    restored = {k: v for k, v in saved.items()
                if k not in user_set | {"out_dir", "init_from", "overwrite"}}
    return checkpoint, restored, logged


def check_resumable(checkpoint, config, ckpt_path, dataset):
    """The model config asked for must be the checkpoint's."""
    saved = dataclasses.asdict(ModelConfig(**checkpoint["model_config"]))
    diffs = [(k, v, getattr(config, k)) for k, v in saved.items() if getattr(config, k) != v]
    if not diffs:
        return
    hint = ""
    if "vocab_size" in [d[0] for d in diffs]:
        hint = f" (vocab_size comes from data/{dataset}/meta.json: prepare it as for training)"
    fail(f"{ckpt_path} was trained with {', '.join(f'{k}={v!r}' for k, v, _ in diffs)}, but this "
         f"run asks for {', '.join(f'{k}={new!r}' for k, _, new in diffs)}; drop those flags to "
         f"resume{hint}")


def restore(checkpoint, model, optimizer, scaler, device_type):
    """Load the weights, the optimizer's moments, the float16 scale and the random state into a
    resumed run's objects."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if scaler.is_enabled() and checkpoint.get("scaler"):  # a resumed float16 run stays exact
        scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["rng"]["cpu"].cpu())
    if device_type in ("cuda", "mps") and checkpoint["rng"].get(device_type) is not None:
        getattr(torch, device_type).set_rng_state(checkpoint["rng"][device_type].cpu())


def rng_states(device_type):
    """The random states a checkpoint keeps, for a resume that draws as an unbroken run would."""
    return {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if device_type == "cuda" else None,
            "mps": torch.mps.get_rng_state() if device_type == "mps" else None}

# -----------------------------------------------------------------------------
# the log: log.jsonl, and the records a checkpoint carries


def read_log(path):
    """The records of a run's log.jsonl (one JSON object per evaluation) and whether its last line
    was torn, cut short by a crash or a full disk, and left out; a broken line before the last
    stops with one line naming it."""
    if not os.path.exists(path):
        return [], False
    if os.path.isdir(path):
        fail(f"{path} is a folder, not a log; move it out of the way, then run again")
    with open(path, "rb") as f:
        lines = [line for line in f.read().split(b"\n") if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
            record["iter"]  # every record has one
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:
                fail(f"{path} line {i + 1} is not a JSON record; delete that line, then run again")
            return records, True
        records.append(record)
    return records, False


def append_log(path, record, on_error=None):
    """Append one record to a run's log.jsonl; a line cut short by a full disk is dropped at the
    next resume."""
    try:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        if on_error:
            on_error(path, e)
        fail(f"could not write {path}: {write_error(path, e)}")


def checkpoint_log(path, checkpoint, ckpt_path):
    """The records a resumed run has logged up to its checkpoint: those the checkpoint carries
    (older checkpoints carry none: then those of the log at path), after checking that the log at
    path is that run's, in which every evaluation both hold is the same. Another run's checkpoint
    in the folder stops with one line, the log untouched."""
    records = read_log(path)[0]
    iter_num = checkpoint["iter_num"]
    carried = checkpoint.get("log")
    if carried is None:
        return [r for r in records if r["iter"] <= iter_num]
    theirs = {r["iter"]: r for r in carried}
    for record in records:
        if record["iter"] not in theirs:
            continue
        if json.dumps(record, sort_keys=True) != json.dumps(theirs[record["iter"]], sort_keys=True):
            losses = [r.get("val_loss") for r in (theirs[record["iter"]], record)]
            losses = [f"{x:.4f}" if isinstance(x, float) else repr(x) for x in losses]
            fail(f"{ckpt_path} (iteration {iter_num}) is not the checkpoint of the run logged in "
                 f"{path}: their evaluations at iteration {record['iter']} differ (val loss "
                 f"{losses[0]} and {losses[1]}); put the run's own {os.path.basename(ckpt_path)} "
                 f"back, or resume this one in a folder of its own")
    return list(carried)


def truncate_log(path, iter_num, on_error=None):
    """Set aside what a log holds after the checkpoint of iteration iter_num, into
    path.after<iter_num>, saying so, and drop a torn last line."""
    records, torn = read_log(path)
    if torn:
        print(f"{path}: dropped its last line, cut short by a crash or a full disk")
    later = [r for r in records if r["iter"] > iter_num]
    if later:  # those evaluations come again; the first ones are kept beside the log, never lost
        aside = f"{path}.after{iter_num}"
        before = open(aside, encoding="utf-8").read() if os.path.exists(aside) else ""
        lines = [json.dumps(r) + "\n" for r in later]
        new = "".join(line for line in lines if line not in before)
        write_atomic(aside, (before + new).encode(), on_error)
        s = "s" * (len(later) > 1)
        print(f"{path}: kept its records up to iteration {iter_num}, the checkpoint's; set aside "
              f"{len(later)} later record{s} (iteration{s} "
              f"{', '.join(str(r['iter']) for r in later)}) in {aside}")
    if later or torn:
        kept = "".join(json.dumps(r) + "\n" for r in records if r["iter"] <= iter_num)
        write_atomic(path, kept.encode(), on_error)

# -----------------------------------------------------------------------------
# provenance: the checkpoint's model and the data it was trained on


def check_same_data(checkpoint, meta, dataset, training=False, data_dir=None):
    """Stop with one line when data/<dataset> (or data_dir) is not what the checkpoint's model was
    trained on: another tokenizer or token numbering (evaluating or sampling would use the wrong
    mapping), or, to resume training or evaluate a split (training=True), other text."""
    trained = checkpoint.get("dataset_meta") or {}  # older checkpoints do not say
    keys = ["tokenizer", "vocab_size", "compact_vocab"]
    keys += ["train_token_sum", "val_token_sum"] * training
    changed = [key for key in keys if key in trained and trained.get(key) != meta.get(key)]
    if changed:
        text_only = set(changed) <= {"train_token_sum", "val_token_sum"}
        what = "its text" if text_only else "its tokens"
        hint = prepare_hint(dataset, trained.get("tokenizer", "gpt2"), "compact_vocab" in trained)
        fail(f"{data_dir or 'data/' + dataset} was prepared again since this model was trained on "
             f"it ({what} differ: {', '.join(changed)}); prepare it as it was for training: {hint}")


def check_tokenizer_record(meta, checkpoint, where, fix):
    """Stop with one line where a tokenizer record (the dataset_meta a checkpoint carries, or a
    dataset's meta.json) cannot be that of the checkpoint's model: a tokenizer other than gpt2 or
    byte, a compact vocabulary that is not distinct GPT-2 ids with end-of-text among them, or a
    number of token ids other than the model's vocab_size (more, or fewer where the run did not set
    vocab_size itself). where: the record's file; fix: what to do."""
    vocab_size = checkpoint["model_config"]["vocab_size"]
    set_by_user = checkpoint["train_config"].get("vocab_size")
    tokenizer = meta.get("tokenizer") if type(meta) is dict else None
    compact = meta.get("compact_vocab") if type(meta) is dict else None
    eot = 0 if tokenizer == "byte" else 50256
    problem = None
    if tokenizer not in ("gpt2", "byte"):
        problem = f"names the tokenizer {tokenizer!r}, not gpt2 or byte"
    elif compact is not None and tokenizer != "gpt2":
        problem = (f"has a compact_vocab, which renumbers gpt2 tokens, beside the {tokenizer} "
                   f"tokenizer")
    elif compact is not None and not (type(compact) is list and len(set(compact)) == len(compact)
                                      and all(type(i) is int and 0 <= i < 50257 for i in compact)):
        problem = "has a compact_vocab that is not a list of distinct GPT-2 token ids"
    elif compact is not None and eot not in compact:
        problem = "has a compact_vocab without the end-of-text token (GPT-2 id 50256)"
    else:
        n = len(compact) if compact else (256 if tokenizer == "byte" else 50257)
        eot_id = compact.index(eot) if compact else eot
        what = f"the {tokenizer} tokenizer has {n} tokens"
        if compact:
            what = f"its compact vocabulary has {n} tokens"
        if meta.get("vocab_size", n) != n:
            problem = f"says vocab_size={meta['vocab_size']!r}, but {what}"
        elif meta.get("eot_token", eot_id) != eot_id:
            problem = (f"says eot_token={meta['eot_token']!r}, but {what}, with end-of-text at "
                       f"{eot_id}")
        elif n > vocab_size or (n != vocab_size and set_by_user is None):
            problem = f"does not fit the model: {what}, the model has vocab_size={vocab_size}"
    if problem:
        fail(f"the tokenizer record in {where} {problem}; {fix}")


def trained_meta(checkpoint, ckpt_path, data_dir=None):
    """The meta.json of the dataset the checkpoint's model was trained on (its tokenizer, compact
    vocabulary): that of data_dir (default data/<dataset> in the working folder) where there is
    one, checked against the model, else the copy the checkpoint carries, checked too, so that
    sample.py and evaluate.py need only the run's folder."""
    dataset = checkpoint["train_config"]["dataset"]
    carried = checkpoint.get("dataset_meta") or {}
    data_dir = data_dir or os.path.join("data", dataset)
    meta_path = os.path.join(data_dir, "meta.json")
    vocab_size = checkpoint["model_config"]["vocab_size"]
    if carried:  # the one tokenizer record that is the model's own
        check_tokenizer_record(carried, checkpoint, f"{ckpt_path} (its dataset_meta)",
                               "the checkpoint was changed, or its record is another run's; use "
                               "the run's own ckpt.pt")
    if not os.path.exists(meta_path) and carried:
        return carried
    meta = read_meta(dataset, data_dir)
    trained = carried.get("tokenizer", meta["tokenizer"])  # older checkpoints do not say
    if meta["tokenizer"] != trained or meta.get("vocab_size", 0) > vocab_size:
        fail(f"{meta_path} says the {meta['tokenizer']} tokenizer ({meta.get('vocab_size')} "
             f"tokens), but the model in {ckpt_path} was trained on {trained} tokens "
             f"(vocab_size={vocab_size}): {data_dir} was prepared again with another tokenizer; "
             f"prepare it as it was for training")
    check_same_data(checkpoint, meta, dataset, data_dir=data_dir)
    check_tokenizer_record(meta, checkpoint, meta_path,
                           f"prepare '{dataset}' again as it was for training")
    return meta


def note_changes(checkpoint, settings, master):
    """A resume with other settings goes on, saying what that changes: another device, precision or
    compile makes the losses differ a little from an unbroken run's; another batch_size or
    eval_iters evaluates other sequences from here on."""
    saved = checkpoint["train_config"]
    if not master:
        return
    notes = {("device", "dtype", "compile"): "the losses will differ a little from an unbroken "
                                             "run's",
             ("batch_size", "eval_iters"): "its evaluations are of other sequences from here on "
                                           "(an evaluation batch is batch_size sequences)"}
    for keys, what in notes.items():
        changed = [k for k in keys if k in saved and settings[k] != saved[k]]
        if changed:
            now = ", ".join(f"{k}={settings[k]!r}" for k in changed)
            then = ", ".join(f"{k}={saved[k]!r}" for k in changed)
            print(f"note: resuming with {now}, not the checkpoint's {then}: {what}", flush=True)


def exit_if_finished(checkpoint, max_iters, logged, out_dir, master):
    """A resume of a run that has trained max_iters steps and evaluated the last: say so, and how to
    train it further, and end."""
    iter_num = checkpoint["iter_num"]
    if iter_num < max_iters or not (logged and logged[-1]["iter"] == iter_num):
        return
    if master:
        print(f"{out_dir} holds a finished run: {iter_num} of max_iters={max_iters} iterations, "
              f"evaluated; to train it further, resume with a larger --max_iters, e.g. "
              f"--max_iters={2 * iter_num or 100}")
    sys.exit(0)


def saved_grad_norm(checkpoint):
    """The gradient norm of the step before a checkpoint, for the next evaluation's record."""
    value = checkpoint.get("grad_norm")
    return None if value is None else torch.tensor(value)


def tokens_trained(checkpoint):
    """The tokens trained on so far, carried over: a resume may change batch_size (older
    checkpoints do not say: computed)."""
    saved = checkpoint["train_config"]
    per_iter = (saved["gradient_accumulation_steps"] * saved["batch_size"]
                * checkpoint["model_config"]["context_size"])
    return checkpoint.get("tokens", checkpoint["iter_num"] * per_iter)


def start_log(out_dir, logged, iter_num, resumed, on_error):
    """A run from scratch (checked: --overwrite=True, or nothing there) removes an earlier run's log
    and checkpoint. A resume sets aside the records logged after its checkpoint, and writes back
    those the checkpoint carries that the log has lost, saying so."""
    log_path = os.path.join(out_dir, "log.jsonl")
    if not resumed:
        for name in ("log.jsonl", "ckpt.pt"):
            if os.path.exists(os.path.join(out_dir, name)):
                os.remove(os.path.join(out_dir, name))
        return
    truncate_log(log_path, iter_num, on_error)
    have = {r["iter"] for r in read_log(log_path)[0]}
    lost = [r["iter"] for r in logged if r["iter"] not in have]
    if not lost:
        return
    write_atomic(log_path, "".join(json.dumps(r) + "\n" for r in logged).encode(), on_error)
    print(f"{log_path}: wrote back {len(lost)} record(s) it had lost (iteration(s) "
          f"{', '.join(map(str, lost))}) from the checkpoint, which carries them")


def import_wandb():
    """Weights & Biases, imported only when asked for."""
    try:
        import wandb
    except ImportError:
        fail("wandb_log=True needs Weights & Biases, which is not installed: pip install wandb, "
             "or train without it: --wandb_log=False")
    return wandb


def start_wandb(wandb, project, name, run_id, train_config):
    """Start (or, with the run_id a checkpoint saved, go on in) a Weights & Biases run; its id."""
    try:
        run = wandb.init(project=project, name=name, id=run_id, resume="allow")
        run.config.update(train_config, allow_val_change=True)  # a resume may change some
    except Exception as e:  # no API key, no network
        detail = (str(e).strip() or "?").splitlines()[0]
        fail(f"W&B could not start ({type(e).__name__}: {detail}); log in with `wandb login`, log "
             f"offline with WANDB_MODE=offline, or train without it: --wandb_log=False")
    return run.id  # saved in the checkpoints: a resume goes on in this W&B run
