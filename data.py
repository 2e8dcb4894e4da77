"""Datasets (data/, checked whole), tasks, batches, every-token windows. Tokenizers: text.py"""
import glob
import hashlib
import importlib
import json
import os
import re
import time

import numpy as np
import torch

from machinery.files import hold_folder
from machinery.hardware import duration, sync
from machinery.process import fail
from model import row_cross_entropy

TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
# a task module's names, and their kinds (tasks/reversal.py shows each)
INTERFACE = {"DEFAULTS": dict, "VOCAB_SIZE": int, "BLOCK_SIZE": int, "get_batch": callable,
             "score": callable, "prompts": callable, "show": callable}


def is_task(name):
    """Is name a generated task, tasks/<name>.py?"""
    return bool(re.fullmatch(r"[a-z]\w*", name)) and os.path.isfile(f"{TASKS}/{name}.py")


def load_task(name, settings=()):
    """tasks/<name>.py, checked: INTERFACE, and DEFAULTS against settings."""
    path = os.path.join(TASKS, f"{name}.py")
    try:
        task = importlib.import_module(f"tasks.{name}")
    except (Exception, SystemExit) as e:  # sys.exit() too: it would end the script silently
        fail(f"the task module {path} does not import ({type(e).__name__}: {e}); fix it")
    wrong = [key for key, kind in INTERFACE.items() if not (callable(getattr(task, key, None))
             if kind is callable else type(getattr(task, key, None)) is kind)]
    wrong += [k for k in ("VOCAB_SIZE", "BLOCK_SIZE") if not wrong and getattr(task, k) < 1]
    if wrong:
        fail(f"the task module {path} lacks {', '.join(wrong)} of the kind a task gives: "
             "DEFAULTS (a dict), VOCAB_SIZE and BLOCK_SIZE (integers above 0), the "
             "others functions (see tasks/reversal.py)")
    unknown = [key for key in task.DEFAULTS if settings and key not in settings]
    if unknown:
        fail(f"the task module {path} sets {', '.join(map(str, unknown))} in DEFAULTS, which "
             "is no setting of a task's model or schedule; see python train.py --help")
    return task


def prepare_command(dataset, offline=False, tokenizer="gpt2", compact=False):
    """The command that builds data/<dataset> under its default name (offline: from your
    copies of its downloads), plus a tokenizer, --compact_vocab the name lacks."""
    splits = "train|valid|test"
    wikitext2 = re.fullmatch(rf"wikitext2_({splits}|all)(?:-({splits}))?_(gpt2|byte)(c?)", dataset)
    wikitext103 = re.fullmatch(r"wikitext103(?:_(\d+)-(\d+))?(_byte)?(c?)", dataset)
    flags = f" --input PATH --name={dataset}"
    if wikitext2:
        split, val, name_tokenizer, name_compact = wikitext2.groups()
        files = ["train", "valid", "test"] if split == "all" else [split, val]
        paths = " ".join(f"PATH/{name}.txt" for name in files if name)
        flags = (f" --wikitext2={split} --tokenizer={name_tokenizer}"
                 + f" --wikitext2_val={val}" * bool(val)
                 + " --compact_vocab" * bool(name_compact) + f" --input {paths}" * offline)
    if wikitext103:
        train, val, byte, name_compact = wikitext103.groups()
        flags = (" --wikitext103" + f" --train_tokens={train} --val_tokens={val}" * bool(train)
                 + " --tokenizer=byte" * bool(byte) + " --compact_vocab" * bool(name_compact)
                 + " --input PATH/" * offline)
    flags += f" --tokenizer={tokenizer}" * ("--tokenizer" not in flags and tokenizer != "gpt2")
    flags += " --compact_vocab" * (compact and "--compact_vocab" not in flags)
    return "python prepare_wikipedia.py" + flags


def check_dataset(dataset, block, vocab_size=None, trained=None, data_dir=None):
    """data/<dataset>'s (or data_dir's) meta.json, its files checked whole, fit for the run
    and for trained (a checkpoint's record): the text its model saw."""
    data_dir = data_dir or os.path.join("data", dataset)
    # the tokenizer to prepare: the model's, else meta.json's, else the vocab's
    tokenizer = (trained or {}).get("tokenizer")
    if tokenizer not in ("gpt2", "byte"):
        tokenizer = "byte" if vocab_size is not None and vocab_size <= 256 else "gpt2"
    if not all(os.path.exists(os.path.join(data_dir, name))
               for name in ("train.bin", "val.bin", "meta.json")):
        online = f"`{prepare_command(dataset, tokenizer=tokenizer)}`"
        offline = f"`{prepare_command(dataset, True, tokenizer)}`"
        where = f" (it downloads; offline, from your copy of the files: {offline})"
        held = [os.path.basename(os.path.dirname(p)) for p in sorted(glob.glob("data/*/meta.json"))]
        tasks = [f"--dataset={os.path.basename(p)[:-3]}"
                 for p in sorted(glob.glob(f"{TASKS}/[a-z]*.py"))]
        fail(f"dataset '{dataset}' not found in {data_dir}/ (data/ holds "
             f"{', '.join(held) or 'no dataset'}): run {online}{where * ('--wikitext' in online)}"
             f", or try a task that needs no data: {' or '.join(tasks)}")
    try:
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        meta.get("vocab_size")
    except (OSError, ValueError, AttributeError, RecursionError):
        meta = {}
    known = meta.get("tokenizer") in ("gpt2", "byte")
    if known and not trained:
        tokenizer = meta["tokenizer"]
    hint = f"`{prepare_command(dataset, False, tokenizer, 'compact_vocab' in (trained or meta))}`"

    def refuse(problem, fix=""):
        fail(f"{problem}; prepare the dataset again: {hint}{fix}")
    if os.path.exists(os.path.join(data_dir, "meta.json.new")):  # see write_dataset
        refuse(f"{data_dir} is half replaced: a preparation was killed mid-rename",
               " (it finishes the rename first)")
    vocab = meta.get("vocab_size")
    if type(vocab) is not int or not 1 <= vocab <= 2 ** 16 or not known:
        refuse(f"{data_dir}/meta.json is not a JSON object with a tokenizer (gpt2 or "
               "byte) and a vocab_size of 1 to 65536")
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        n_tokens = meta.get(f"{split}_tokens")
        if type(n_tokens) is not int or os.path.getsize(path) != 2 * n_tokens:
            refuse(f"{path} has {os.path.getsize(path) // 2:,} tokens, but meta.json says "
                   f"{split}_tokens={n_tokens!r}: a file cut short, or of another preparation")
        if n_tokens <= block:  # e.g. val.bin of --val_fraction 0
            refuse(f"{path} has {n_tokens} tokens, too few for context_size={block}: lower "
                   "--context_size, or give more text", " (and --val_fraction 0.05 or more)")
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        if tokens.max() >= vocab:
            refuse(f"{path} holds token {tokens.max()}, not below vocab_size={vocab}")
        # the sum tells preparations apart; the sha256 (newer ones) any change
        for key, found in ((f"{split}_token_sum", lambda: int(tokens.sum(dtype=np.uint64))),
                           (f"{split}_sha256", lambda: hashlib.sha256(tokens).hexdigest())):
            if key in meta and meta[key] != found():
                refuse(f"{path} does not match meta.json ({key} differs): files of different "
                       "preparations, or a damaged file")
    keys = ["tokenizer", "vocab_size", "compact_vocab", "train_token_sum",
            "val_token_sum", "train_sha256", "val_sha256"]
    changed = [key for key in keys if key in (trained or {}) and trained[key] != meta.get(key)]
    if changed:
        what = "its text" if changed[0].startswith(("train", "val")) else "its tokens"
        command = prepare_command(dataset, False, trained["tokenizer"], "compact_vocab" in trained)
        fail(f"{data_dir} was prepared again since this model was trained on it ({what} "
             f"differ: {', '.join(changed)}); prepare it as it was: "
             f"`{command}`, or give --input text")
    if vocab_size is not None and vocab_size < vocab:
        fail(f"vocab_size={vocab_size} is smaller than the dataset's {vocab} tokens; "
             f"leave it unset, or prepare {data_dir} again: "
             f"`{prepare_command(dataset, tokenizer='byte' if vocab_size <= 256 else 'gpt2')}`")
    return meta


def open_dataset(dataset, task, context_size, vocab_size, command, trained=None):
    """(source, block, vocab_size, meta) of the task or data/<dataset>, held, checked."""
    if task is not None:
        if context_size < task.BLOCK_SIZE or (vocab_size or task.VOCAB_SIZE) < task.VOCAB_SIZE:
            fail(f"{dataset} needs context_size >= {task.BLOCK_SIZE} and vocab_size >= "
                 f"{task.VOCAB_SIZE}, not {context_size} and {vocab_size}; leave them unset")
        return task, task.BLOCK_SIZE, vocab_size or task.VOCAB_SIZE, {"task": dataset}
    source = os.path.join("data", dataset)
    if os.path.isdir(source):
        hold_folder(source, "--dataset", command, shared=True)
    meta = check_dataset(dataset, context_size, vocab_size, trained)
    return source, context_size, vocab_size or meta["vocab_size"], meta


class Batches:
    """Batches on the device; step it's from (seed, it) alone, however run."""

    def __init__(self, source, block, batch_size, gradient_accumulation_steps, seed, device):
        self.source = source
        self.block = block
        self.batch_size = batch_size
        self.step_size = batch_size * gradient_accumulation_steps  # sequences a step
        self.seed = seed
        self.device = device

    def get(self, split, rng, size, rows=slice(None)):
        """(x, y): rows of size sequences drawn by rng (text: windows, y one token on)."""
        if not isinstance(self.source, str):  # a task's
            x, y = (t[rows] for t in self.source.get_batch(split, size, rng))
            return x.to(self.device), y.to(self.device)
        path = os.path.join(self.source, f"{split}.bin")
        data = np.memmap(path, dtype=np.uint16, mode="r")  # anew: no memory growth
        ix = rng.integers(len(data) - self.block, size=size)[rows]
        x = np.stack([data[i:i + self.block] for i in ix]).astype(np.int64)
        y = np.stack([data[i + 1:i + 1 + self.block] for i in ix]).astype(np.int64)
        return torch.from_numpy(x).to(self.device), torch.from_numpy(y).to(self.device)

    def train(self, it, micro_step):
        """Micro-batch micro_step of step it: its rows of the step's sequences."""
        rows = slice(micro_step * self.batch_size, (micro_step + 1) * self.batch_size)
        rng = np.random.default_rng([self.seed, 0, it, 0])
        rng.integers(2 ** 62)  # micro-step 0's dropout seed, then the sequences
        return self.get("train", rng, self.step_size, rows)

    def dropout_seed(self, it, micro_step):
        return int(np.random.default_rng([self.seed, 0, it, micro_step]).integers(2 ** 62))

    def eval(self, split, k):
        """Evaluation batch k of a split: the same at every evaluation."""
        rng = np.random.default_rng([self.seed, 1 + ("train", "val").index(split), k, 0])
        return self.get(split, rng, self.batch_size)

# -----------------------------------------------------------------------------
# every token once: windows of context_size + 1 tokens that share their edge token


def window_starts(n_tokens, block):
    """Window starts: every token but the first is a target once."""
    return list(range(0, n_tokens - 1, block))


@torch.no_grad()
def window_losses(model, tokens, block, batch_size, device, starts=None, autocast=None):
    """Yields (targets, losses) per batch of windows at starts (default: all, in order), in
    eval mode; nothing kept between batches."""
    was_training = model.training
    model.eval()
    starts = window_starts(len(tokens), block) if starts is None else starts
    lengths = [min(block, len(tokens) - 1 - s) for s in starts]
    for i in range(0, len(starts), batch_size):
        batch = list(zip(starts[i:i + batch_size], lengths[i:i + batch_size]))
        # a shorter last window goes on its own
        for T in sorted({n for _, n in batch}, reverse=True):
            group = [s for s, n in batch if n == T]
            x = np.stack([tokens[s:s + T] for s in group]).astype(np.int64)
            y = np.stack([tokens[s + 1:s + 1 + T] for s in group]).astype(np.int64)
            x = torch.from_numpy(x).to(device)
            y = torch.from_numpy(y).to(device).flatten()
            with autocast or torch.autocast(x.device.type, enabled=False):
                h = model.hidden_states(x)[0].flatten(0, 1)  # (B*T, C)
            rows = 256 if x.device.type == "cpu" else len(h)  # a GPU: all at once
            losses = row_cross_entropy(h, model.lm_head.weight, y, rows).double()
            yield y.cpu().numpy(), losses.cpu().numpy()
    model.train(was_training)


def split_losses(model, data_dir, block, batch_size, device, autocast=None):
    """Mean loss over every val.bin token and as many train.bin windows (512 at most);
    val_loss_seen_ids leaves out val ids train.bin lacks (none can learn them)."""
    val_tokens = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
    train_tokens = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    # 512 x context_size: a precise enough mean
    n_windows = min(512, len(window_starts(len(val_tokens), block)))
    train_starts = np.linspace(0, len(train_tokens) - block - 1, n_windows).astype(int).tolist()
    train = np.zeros(2)  # total loss, tokens
    for _, losses in window_losses(model, train_tokens, block, batch_size, device,
                                   train_starts, autocast):
        train += losses.sum(), len(losses)
    seen_ids = np.zeros(max(int(train_tokens.max()), int(val_tokens.max())) + 1, dtype=bool)
    seen_ids[np.unique(train_tokens)] = True
    val = np.zeros(4)  # loss, tokens; the same of ids seen in train.bin
    for targets, losses in window_losses(model, val_tokens, block, batch_size, device,
                                         None, autocast):
        seen = seen_ids[targets]
        val += losses.sum(), len(losses), losses[seen].sum(), seen.sum()
    return {"train_loss": float(train[0] / train[1]), "val_loss": float(val[0] / val[1]),
            "val_loss_seen_ids": float(val[2] / val[3])}


def introduce_run(model, batch_size, gradient_accumulation_steps, max_iters, eval_iters,
                  eval_interval, device):
    """The write-up's data not prepared: the run, its time here (a step timed on random
    tokens), how to prepare the data, a CPU-sized run."""
    c = model.config
    # a few sequences timed, scaled to the micro-batch
    rows = min(batch_size, 4)
    x = torch.randint(c.vocab_size, (rows, c.context_size), device=device)
    seconds = []
    for _ in range(2):  # the first warms up
        t0 = time.perf_counter()
        model.to(device)(x, x, return_logits=False)[1].backward()
        sync(device)
        seconds.append(time.perf_counter() - t0)
    micro_steps = gradient_accumulation_steps
    step = min(seconds) * batch_size / rows * micro_steps
    # an evaluation: eval_iters forward passes a split, each a third of a micro-step
    evals = 2 * eval_iters * (max_iters // eval_interval + 1) * step / micro_steps / 3
    tokens = max_iters * gradient_accumulation_steps * batch_size * c.context_size
    cpu = {"baseline": "cpu_baseline", "parallel": "cpu_parallel"}.get(
        c.variant, "cpu_encdec_none" if c.embedding_loss == "none" else "cpu_encdec_mse_pos_sub")
    fail(f"data/wikitext103 is not prepared. This run trains the write-up's {c.variant} "
         f"model ({model.num_params() / 1e6:.1f}M parameters)\n  on {tokens / 1e9:.2f}B "
         f"tokens, {max_iters:,} steps over WikiText-103's 38M: about "
         f"{duration(max_iters * step + evals)} on this machine ({device}, timed on one "
         "step).\n  prepare its data (a download, then GPT-2 tokens):  python "
         f"prepare_wikipedia.py\n  or train a smaller {c.variant} model (byte tokens) on "
         f"a CPU in minutes:  python train.py config/{cpu}.py\n    (its data:  python "
         "prepare_wikipedia.py --wikitext2=valid --tokenizer=byte)")
