"""The datasets of data/ and tasks/, and a run's batches (the tokenizers and text files: text.py;
the loss over every token of a text: evaluate.py)."""
import importlib
import json
import os
import re

import numpy as np
import torch

from machinery.files import folder_chain, hold_folder, note_holder
from machinery.process import fail


def find_dataset(dataset, out_dir):
    """The folder data/<dataset> of a run trained on it: in the working folder, else beside the
    run's folder or in a folder above it (where the run was trained), else in this repository's
    folder; None where none holds meta.json."""
    repository = os.path.dirname(os.path.abspath(__file__))
    for folder in ["", *reversed(folder_chain(os.path.abspath(out_dir))), repository]:
        if os.path.exists(os.path.join(folder, "data", dataset, "meta.json")):
            return os.path.join(folder, "data", dataset)
    return None


def generated_task(dataset, data_dir=None):
    """The module tasks/<dataset>.py, else None; one line where it does not import, lacks a name of
    the interface or shares its name with a folder (data_dir, default data/<dataset>). Interface:
    DEFAULTS, VOCAB_SIZE, BLOCK_SIZE, get_batch(split, size, rng), score(model, split, device) ->
    (accuracy, sequences), prompts(start, num_samples, seed), show(prompt, answer)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", f"{dataset}.py")
    if not re.fullmatch(r"[a-z]\w*", dataset) or not os.path.isfile(path):
        return None
    data_dir = data_dir or os.path.join("data", dataset)
    if os.path.isdir(data_dir):  # one name, one thing
        refuse_task(dataset, path, data_dir)
    try:
        task = importlib.import_module(f"tasks.{dataset}")
    except Exception as e:
        fail(f"the task module {path} does not import ({type(e).__name__}: {e}); fix it")
    interface = ("DEFAULTS", "VOCAB_SIZE", "BLOCK_SIZE", "get_batch", "score", "prompts", "show")
    if not all(hasattr(task, name) for name in interface):
        refuse_task(dataset, path, data_dir, task, interface)
    return task


def refuse_task(dataset, path, data_dir, task=None, interface=()):
    """The one line for a task module that shares its name with a dataset folder, or (given the
    module) lacks a name of the interface."""
    if task is None:
        fail(f"--dataset={dataset} names both the task {path} and the dataset folder {data_dir}/; "
             f"rename one of them (prepare the text again with another --name)")
    missing = [name for name in interface if not hasattr(task, name)]
    fail(f"the task module {path} lacks {', '.join(missing)}; a task gives "
         f"{', '.join(interface)} (see tasks/reversal.py)")


def prepare_command(dataset, offline=False):
    """The command that builds data/<dataset> under the default names, for the hint when it is
    missing. offline: from local copies of the files it downloads (--input PATH/valid.txt: a copy
    of WikiText-2's valid.txt, checked)."""
    splits = "train|valid|test"
    wikitext2 = re.fullmatch(rf"wikitext2_({splits}|all)(?:-({splits}))?_(gpt2|byte)(c?)", dataset)
    if wikitext2:
        splits = [wikitext2[1], wikitext2[2]]
        if wikitext2[1] == "all":
            splits = ["train", "valid", "test"]
        paths = " ".join(f"PATH/{split}.txt" for split in splits if split)
        return (f"python prepare_wikipedia.py --wikitext2={wikitext2[1]} --tokenizer={wikitext2[3]}"
                + f" --wikitext2_val={wikitext2[2]}" * bool(wikitext2[2])
                + " --compact_vocab" * bool(wikitext2[4]) + f" --input {paths}" * offline)
    wikitext103 = re.fullmatch(r"wikitext103(?:_(\d+)-(\d+))?(_byte)?(c?)", dataset)
    if wikitext103:
        sizes = f" --train_tokens={wikitext103[1]} --val_tokens={wikitext103[2]}"
        return ("python prepare_wikipedia.py --wikitext103" + sizes * bool(wikitext103[1])
                + " --tokenizer=byte" * bool(wikitext103[3])
                + " --compact_vocab" * bool(wikitext103[4]) + " --input PATH/" * offline)
    return f"python prepare_wikipedia.py --input PATH --name={dataset}"


def prepare_hint(dataset, tokenizer, compact=False, offline=False):
    """prepare_command in backquotes, with --tokenizer (and --compact_vocab) where the name does not
    already say it."""
    command = prepare_command(dataset, offline)
    if "--tokenizer" not in command and tokenizer != "gpt2":
        command += f" --tokenizer={tokenizer}"
    if compact and "--compact_vocab" not in command:
        command += " --compact_vocab"
    return f"`{command}`"


def check_dataset(dataset, block, vocab_size):
    """data/<dataset>'s meta.json, once its token files are checked whole and of one preparation (at
    the start, not mid-training). vocab_size: the run's, or None (256 or less wants byte tokens)."""
    data_dir = os.path.join("data", dataset)
    if not all(os.path.exists(os.path.join(data_dir, f))
               for f in ("train.bin", "val.bin", "meta.json")):
        refuse_dataset(dataset, {}, block, vocab_size)
    try:
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        dataset_vocab = meta["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):  # OSError: e.g. a folder named meta.json
        meta = {}
        dataset_vocab = None
    if type(dataset_vocab) is not int or dataset_vocab < 1:
        refuse_dataset(dataset, meta, block, vocab_size)
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        n_tokens, odd = divmod(os.path.getsize(path), 2)
        if odd or meta.get(f"{split}_tokens") not in (None, n_tokens) or n_tokens <= block:
            refuse_dataset(dataset, meta, block, vocab_size)
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        sums = (None, int(tokens.sum(dtype=np.uint64)))  # meta.json's, where it has one
        if int(tokens.max()) >= dataset_vocab or meta.get(f"{split}_token_sum") not in sums:
            refuse_dataset(dataset, meta, block, vocab_size)
    if vocab_size is not None and vocab_size < dataset_vocab:  # e.g. a byte config on GPT-2 tokens
        refuse_dataset(dataset, meta, block, vocab_size)
    return meta


def refuse_dataset(dataset, meta, block, vocab_size):
    """The one line for a dataset check_dataset refuses: missing (the command that prepares it, the
    datasets data/ holds, the tasks, which need none), broken (what is wrong, and the command that
    prepares it again), or of more tokens than the run's vocab_size."""
    import glob
    data_dir = os.path.join("data", dataset)
    tokenizer = "byte" if vocab_size is not None and vocab_size <= 256 else "gpt2"
    if not all(os.path.exists(os.path.join(data_dir, f))
               for f in ("train.bin", "val.bin", "meta.json")):
        online = prepare_hint(dataset, tokenizer)
        offline = prepare_hint(dataset, tokenizer, offline=True)
        where = f" (it downloads; offline, from your copy of the files: {offline})"
        held = sorted(os.path.basename(os.path.dirname(path))
                      for path in glob.glob(os.path.join("data", "*", "meta.json")))
        tasks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", "[a-z]*.py")
        tasks = sorted(f"--dataset={os.path.basename(path)[:-3]}" for path in glob.glob(tasks))
        fail(f"dataset '{dataset}' not found in data/{dataset}/ (data/ holds "
             f"{', '.join(held) or 'no dataset'}): run {online}{where * ('--wikitext' in online)}, "
             f"or try a task that needs no data: {' or '.join(tasks)}")
    dataset_vocab = meta.get("vocab_size")

    def refuse(problem, fix=""):
        hint = prepare_hint(dataset, meta.get("tokenizer", tokenizer))
        fail(f"{problem}; prepare the dataset again: {hint}{fix}")
    if type(dataset_vocab) is not int or dataset_vocab < 1:
        refuse(f"{data_dir}/meta.json is not a JSON object with a positive vocab_size")
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        expected = meta.get(f"{split}_tokens")
        n_bytes = os.path.getsize(path)
        if n_bytes % 2:
            refuse(f"{path} has an odd number of bytes ({n_bytes:,}), not 2 per token: it was cut "
                   f"short")
        if expected is not None and n_bytes != 2 * expected:
            refuse(f"{path} has {n_bytes // 2:,} tokens, but meta.json says {split}_tokens="
                   f"{expected:,}: a file cut short, or files of different preparations")
        if n_bytes == 0 and split == "val":
            refuse(f"{path} is empty (prepared with --val_fraction 0)", " with --val_fraction 0.05")
        if n_bytes // 2 <= block:
            fail(f"{path} has {n_bytes // 2} tokens, too few for context_size={block}; "
                 f"prepare more text or lower --context_size")
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        largest = int(tokens.max())
        if largest >= dataset_vocab:
            refuse(f"{path} holds token id {largest}, but meta.json's vocab_size is "
                   f"{dataset_vocab}: files of different preparations")
        if meta.get(f"{split}_token_sum") not in (None, int(tokens.sum(dtype=np.uint64))):
            refuse(f"{path} does not hold the tokens meta.json was written for ({split}_token_sum "
                   f"differs): files of different preparations, or a damaged file")
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {dataset_vocab} tokens; leave "
         f"vocab_size unset, or prepare data/{dataset} again: {prepare_hint(dataset, tokenizer)}")


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


def open_dataset(dataset, context_size, vocab_size, command):
    """(source, block, vocab_size, meta): the task module or data/<dataset> (held till the run
    ends); a sequence's tokens; the run's, else the dataset's vocab_size; meta.json ({}: a task)."""
    task = generated_task(dataset)
    if task is not None:
        small_vocab = vocab_size is not None and vocab_size < task.VOCAB_SIZE
        if context_size < task.BLOCK_SIZE or small_vocab:
            task_misfit(dataset, task, context_size, vocab_size)
        return task, task.BLOCK_SIZE, vocab_size or task.VOCAB_SIZE, {}
    source = os.path.join("data", dataset)
    if os.path.isdir(source):
        hold_folder(source, "--dataset", shared=True)
        note_holder(source, command, shared=True)
    meta = check_dataset(dataset, context_size, vocab_size)
    return source, context_size, vocab_size or meta["vocab_size"], meta


def task_misfit(dataset, task, context_size, vocab_size):
    """The one line for a context_size or a vocab_size too small for a task."""
    if context_size < task.BLOCK_SIZE:
        fail(f"context_size={context_size} is too short for {dataset} sequences of "
             f"{task.BLOCK_SIZE} tokens; leave context_size unset")
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {task.VOCAB_SIZE} tokens; "
         f"leave vocab_size unset")


class Batches:
    """A run's batches on its device: step `it`'s sequences are drawn from (seed, it) alone,
    whatever the micro-batch size, the processes and the restarts."""

    def __init__(self, source, block, batch_size, gradient_accumulation_steps, seed, device):
        self.source = source
        self.block = block
        self.batch_size = batch_size
        self.step_size = batch_size * gradient_accumulation_steps  # sequences per optimizer step
        self.seed = seed
        self.device = device

    def get(self, split, rng, size, rows=slice(None)):
        """(x, y) on the device: rows `rows` of `size` sequences drawn by rng."""
        if isinstance(self.source, str):
            x, y = self.windows(split, rng, size, rows)
        else:
            x, y = (t[rows] for t in self.source.get_batch(split, size, rng))
        cuda = str(self.device).startswith("cuda")
        if cuda:  # pinned memory: the copy to the GPU overlaps its work
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(self.device, non_blocking=cuda), y.to(self.device, non_blocking=cuda)

    def windows(self, split, rng, size, rows):
        """Windows of block tokens at random places of split.bin, and the same shifted by one."""
        path = os.path.join(self.source, f"{split}.bin")
        data = np.memmap(path, dtype=np.uint16, mode="r")  # opened anew: its memory does not grow
        ix = rng.integers(len(data) - self.block, size=size)[rows]
        x = torch.from_numpy(np.stack([data[i:i + self.block] for i in ix]).astype(np.int64))
        y = np.stack([data[i + 1:i + 1 + self.block] for i in ix])
        y = torch.from_numpy(y.astype(np.int64))
        return x, y

    def train(self, it, micro_step):
        """Micro-batch `micro_step` of iteration `it`: its rows of the step's sequences."""
        rows = slice(micro_step * self.batch_size, (micro_step + 1) * self.batch_size)
        rng = np.random.default_rng([self.seed, 0, it, 0])
        rng.integers(2 ** 62)  # micro-step 0's dropout seed is drawn first, then the sequences
        return self.get("train", rng, self.step_size, rows)

    def dropout_seed(self, it, micro_step):
        return int(np.random.default_rng([self.seed, 0, it, micro_step]).integers(2 ** 62))

    def eval(self, split, k):
        """Evaluation batch k of a split: the same at every evaluation."""
        rng = np.random.default_rng([self.seed, 1 + ("train", "val").index(split), k, 0])
        return self.get(split, rng, self.batch_size)
