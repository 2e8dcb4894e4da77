"""
A run's folder read back: a resume (resume, then the checks of its checkpoint and log), and the
model, log and provenance of a checkpoint for sample.py and evaluate.py (load_checkpoint,
read_log). A run from scratch never imports it.
"""
import json
import os
import sys
import zipfile

import torch

from machinery.file_errors import write_error
from machinery.errors import REPOSITORY, prepare_hint
from machinery.files import folder_chain, hold_folder, write_atomic
from machinery.process import fail


def resume(out_dir, asked, user_set, master, command):
    """The checkpoint a resumed run goes on from, and the settings it restores (every one not set on
    the command line or in a config file). asked: the dataset and seed the run was given. Its
    "log" becomes the records its run logged up to it (older checkpoints: those of log.jsonl)."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path} to resume from; train with --init_from=scratch "
             f"first, or set --out_dir")
    if master:  # before reading the checkpoint: a second process resuming it would repeat its steps
        hold_folder(out_dir, "--out_dir", command)
    checkpoint = read_checkpoint(ckpt_path, "cpu", "restore a good copy or train from scratch in a "
                                                   "new --out_dir")
    # and not another run's checkpoint, put in its folder
    checkpoint["log"] = checkpoint_log(os.path.join(out_dir, "log.jsonl"), checkpoint, ckpt_path)
    saved = checkpoint["train_config"]
    # the seed draws the batches and the evaluation batches: a new one breaks the curves
    for key in ("dataset", "seed"):
        if key in user_set and asked[key] != saved[key]:
            fail(f"{ckpt_path} was trained with {key}={saved[key]!r}, not {asked[key]!r}; "
                 f"drop --{key} to resume it")
    restored = {k: v for k, v in saved.items()
                if k not in user_set | {"out_dir", "init_from", "overwrite"}}
    return checkpoint, restored


def check_resume(checkpoint, config, settings, meta, master):
    """A resume's checks before its folder is touched: the checkpoint's model is the one asked for,
    its data the same (meta), a finished run ends here, and other settings are noted."""
    check_resumable(checkpoint, config, settings)
    if meta:  # the same tokens and text as the run so far (a generated task has none)
        check_same_data(checkpoint, meta, settings["dataset"], training=True)
    exit_if_finished(checkpoint, settings["max_iters"], settings["out_dir"], master)
    note_changes(checkpoint, settings, master)


def check_resumable(checkpoint, config, settings):
    """The model config asked for must be the checkpoint's."""
    saved = checkpoint["model_config"]
    diffs = [(k, v, getattr(config, k)) for k, v in saved.items() if getattr(config, k) != v]
    if not diffs:
        return
    hint = ""
    if "vocab_size" in [d[0] for d in diffs]:
        hint = (f" (vocab_size comes from data/{settings['dataset']}/meta.json: prepare it as for "
                f"training)")
    ckpt_path = os.path.join(settings["out_dir"], "ckpt.pt")
    fail(f"{ckpt_path} was trained with {', '.join(f'{k}={v!r}' for k, v, _ in diffs)}, but this "
         f"run asks for {', '.join(f'{k}={new!r}' for k, _, new in diffs)}; drop those flags to "
         f"resume{hint}")


def exit_if_finished(checkpoint, max_iters, out_dir, master):
    """A resume of a run that has trained max_iters steps and evaluated the last: say so, and how to
    train it further, and end."""
    iter_num = checkpoint["iter_num"]
    logged = checkpoint["log"]
    if iter_num < max_iters or not (logged and logged[-1]["iter"] == iter_num):
        return
    if master:
        print(f"{out_dir} holds a finished run: {iter_num} of max_iters={max_iters} iterations, "
              f"evaluated; to train it further, resume with a larger --max_iters, e.g. "
              f"--max_iters={2 * iter_num or 100}")
    sys.exit(0)


def note_changes(checkpoint, settings, master):
    """A resume with other settings goes on, saying what that changes: another device, precision or
    compile makes the losses differ a little from an unbroken run's; another batch_size or
    eval_iters evaluates other sequences from here on; another gradient_accumulation_steps trains
    on other steps."""
    saved = checkpoint["train_config"]
    if not master:
        return
    notes = {("device", "dtype", "compile"): "the losses will differ a little from an unbroken "
                                             "run's",
             ("batch_size", "eval_iters"): "its evaluations are of other sequences from here on "
                                           "(an evaluation batch is batch_size sequences)",
             ("gradient_accumulation_steps",): "its steps are of other sequences from here on (a "
                                               "step is batch_size x gradient_accumulation_steps "
                                               "sequences)"}
    for keys, what in notes.items():
        changed = [k for k in keys if k in saved and settings[k] != saved[k]]
        if changed:
            now = ", ".join(f"{k}={settings[k]!r}" for k in changed)
            then = ", ".join(f"{k}={saved[k]!r}" for k in changed)
            print(f"note: resuming with {now}, not the checkpoint's {then}: {what}", flush=True)


def restore(checkpoint, model, optimizer, scaler, master):
    """Load the weights, the optimizer's moments, the float16 scale and the random state into a
    resumed run's objects; a checkpoint without the optimizer's state or the random state (one
    written by other code) goes on without it, saying so. Returns (iter_num, best_val_loss, tokens
    seen, grad_norm, the records logged)."""
    model.load_state_dict(checkpoint["model"])
    lost = [what for key, what in (("optimizer", "the optimizer's moments (AdamW starts them "
                                                 "again)"),
                                   ("rng", "the random state (dropout draws from the seed)"))
            if not checkpoint.get(key)]
    if checkpoint.get("optimizer"):
        optimizer.load_state_dict(checkpoint["optimizer"])
    if scaler.is_enabled() and checkpoint.get("scaler"):  # a resumed float16 run stays exact
        scaler.load_state_dict(checkpoint["scaler"])
    rng = checkpoint.get("rng") or {}
    if rng.get("cpu") is not None:
        torch.set_rng_state(rng["cpu"].cpu())
    device_type = next(model.parameters()).device.type
    if device_type in ("cuda", "mps") and rng.get(device_type) is not None:
        getattr(torch, device_type).set_rng_state(rng[device_type].cpu())
    if lost and master:
        print(f"note: the checkpoint has no {' and no '.join(lost)}: the losses will differ a "
              f"little from an unbroken run's", flush=True)
    grad_norm = checkpoint.get("grad_norm")  # of the step before it, for the next evaluation
    return (checkpoint["iter_num"], checkpoint["best_val_loss"], tokens_trained(checkpoint),
            None if grad_norm is None else torch.tensor(grad_norm), checkpoint["log"])


def tokens_trained(checkpoint):
    """The tokens trained on so far, carried over: a resume may change batch_size (older
    checkpoints do not say: computed)."""
    saved = checkpoint["train_config"]
    per_iter = (saved["gradient_accumulation_steps"] * saved["batch_size"]
                * checkpoint["model_config"]["context_size"])
    return checkpoint.get("tokens", checkpoint["iter_num"] * per_iter)


# -----------------------------------------------------------------------------
# the checkpoint, and the log it carries


def read_checkpoint(ckpt_path, device, fix):
    """The checkpoint dict at ckpt_path, or one line where it is damaged or unreadable."""
    damaged = damaged_record(ckpt_path)
    if damaged:
        fail(f"checkpoint {ckpt_path} is damaged: its record {damaged} fails its CRC-32 check (a "
             f"disk or copy error); {fix}")
    try:
        checkpoint = torch.load(ckpt_path, map_location=device, weights_only=True)  # no code run
        checkpoint["model"].items()
        dict(**checkpoint["model_config"])
        checkpoint["train_config"]["dataset"]  # every reader needs them
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); {fix}")
    return checkpoint


def damaged_record(path):
    """The first record of the checkpoint (a zip file) whose bytes fail their CRC-32, which
    torch.load does not check; None where all are whole or the file is no zip (torch.load then says
    it cannot read it)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return None


def same(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


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
    for record in records:  # another run's checkpoint: no record of an iteration it carries matches
        it = record["iter"]
        if it in theirs and not any(same(r, theirs[it]) for r in records if r["iter"] == it):
            losses = [r.get("val_loss") for r in (theirs[it], record)]
            losses = [f"{x:.4f}" if isinstance(x, float) else repr(x) for x in losses]
            fail(f"{ckpt_path} (iteration {iter_num}) is not the checkpoint of the run logged in "
                 f"{path}: their evaluations at iteration {it} differ (val loss {losses[0]} and "
                 f"{losses[1]}); put the run's own {os.path.basename(ckpt_path)} back, or resume "
                 f"this one in a folder of its own")
    return list(carried)


def rebuild_log(out_dir, checkpoint):
    """A resume leaves in log.jsonl exactly the records its checkpoint carries: those logged after
    it set aside into log.jsonl.after<iteration>, any other (another run's, one written twice)
    into log.jsonl.aside, a torn last line dropped, and the records the log has lost written
    back, each said in one line."""
    path = os.path.join(out_dir, "log.jsonl")
    iter_num, carried = checkpoint["iter_num"], checkpoint["log"]

    def failed(path, error, size=None):  # the log before stays whole
        fail(f"could not write {path}: {write_error(path, error, size)}; the checkpoint "
             f"{os.path.join(out_dir, 'ckpt.pt')} (iteration {iter_num}) is kept, continue with "
             f"`python train.py --out_dir={out_dir} --init_from=resume`")
    records, torn = read_log(path)
    if torn:
        print(f"{path}: dropped its last line, cut short by a crash or a full disk")
    later = [r for r in records if r["iter"] > iter_num]
    # those evaluations come again; the first ones are kept beside the log, never lost
    set_aside(path, f"{path}.after{iter_num}", later, failed, f"kept its records up to iteration "
              f"{iter_num}, the checkpoint's; set aside", "later ")
    missing = list(carried)  # the checkpoint's records the log has not (yet) shown
    foreign = []
    for record in records:
        match = next((r for r in missing if same(r, record)), None)
        if match is not None:
            missing.remove(match)
        elif record["iter"] <= iter_num:
            foreign.append(record)
    set_aside(path, f"{path}.aside", foreign, failed, "set aside", "",
              " its checkpoint does not carry", ": another run's, or written twice")
    if later or torn or foreign or missing:
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in carried).encode(), failed)
    if missing:
        print(f"{path}: wrote back {len(missing)} record(s) it had lost (iteration(s) "
              f"{', '.join(str(r['iter']) for r in missing)}) from the checkpoint, which carries "
              f"them")


def set_aside(path, aside, records, on_error, did, which, what="", why=""):
    """Add records to the file aside (kept, never lost), and say so in one line."""
    if not records:
        return
    before = open(aside, encoding="utf-8").read() if os.path.exists(aside) else ""
    lines = [json.dumps(r) + "\n" for r in records]
    new = "".join(line for line in lines if line not in before)
    write_atomic(aside, (before + new).encode(), on_error)
    s = "s" * (len(records) > 1)
    print(f"{path}: {did} {len(records)} {which}record{s}{what} (iteration{s} "
          f"{', '.join(str(r['iter']) for r in records)}) in {aside}{why}")


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
        compact = "compact_vocab" in trained
        command = prepare_hint(dataset, trained.get("tokenizer", "gpt2"), compact)
        fail(f"{data_dir or 'data/' + dataset} was prepared again since this model was trained on "
             f"it ({what} differ: {', '.join(changed)}); prepare it as it was for training: "
             f"{command}")


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


def load_checkpoint(out_dir, device="cpu", fix="use another run's --out_dir", build=None):
    """(checkpoint dict, model with its weights on device, in eval mode) of out_dir/ckpt.pt, or one
    line saying what is wrong. build: the model of a model_config dict, e.g.
    `lambda c: build_model(ModelConfig(**c))` (model.py)."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(ckpt_path):
        fail(f"no checkpoint at {ckpt_path}; train one with train.py --out_dir={out_dir}, "
             f"or point --out_dir at a run's folder")
    checkpoint = read_checkpoint(ckpt_path, device, fix)
    try:
        model = build(checkpoint["model_config"])
        model.load_state_dict(checkpoint["model"])
    except Exception as e:
        fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); {fix}")
    return checkpoint, model.to(device).eval()


def find_dataset(dataset, out_dir):
    """The folder data/<dataset> of a run trained on it: in the working folder, else beside the
    run's folder or in a folder above it (where the run was trained), else in this repository's
    folder; None where none holds meta.json."""
    for folder in ["", *reversed(folder_chain(os.path.abspath(out_dir))), REPOSITORY]:
        if os.path.exists(os.path.join(folder, "data", dataset, "meta.json")):
            return os.path.join(folder, "data", dataset)
    return None


def read_meta(dataset, data_dir=None):
    """data/<dataset>/meta.json (or data_dir's), for a trained model's tokenizer; one line naming
    the fix when it is missing or broken."""
    meta_path = os.path.join(data_dir or os.path.join("data", dataset), "meta.json")
    if not os.path.exists(meta_path):
        fail(f"{meta_path} not found, and this checkpoint is older than the ones that carry their "
             f"tokenizer; run from the folder you trained in, or prepare '{dataset}' again")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        tokenizer = meta["tokenizer"]
    except (OSError, ValueError, KeyError, TypeError):  # OSError: e.g. a folder named meta.json
        tokenizer = None
    if tokenizer not in ("gpt2", "byte"):
        fail(f"{meta_path} is not a JSON object naming its tokenizer (gpt2 or byte); "
             f"prepare '{dataset}' again with prepare_wikipedia.py")
    return meta
