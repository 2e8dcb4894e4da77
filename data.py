"""The datasets of data/ and tasks/, and a run's batches (the tokenizers: text.py)."""
import importlib
import json
import os
import re

import numpy as np
import torch

from machinery.files import hold_folder
from machinery.process import fail


def generated_task(dataset, data_dir=None):
    """The module tasks/<dataset>.py, else None; one line where it does not import, lacks a name of
    the interface or shares its name with a folder (data_dir, default data/<dataset>). Interface:
    DEFAULTS, VOCAB_SIZE, BLOCK_SIZE, get_batch(split, size, rng), score(model, split, device) ->
    (accuracy, sequences), prompts(start, num_samples, seed), show(prompt, answer)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks", f"{dataset}.py")
    if not re.fullmatch(r"[a-z]\w*", dataset) or not os.path.isfile(path):
        return None
    try:
        task = importlib.import_module(f"tasks.{dataset}")
    except Exception as e:
        fail(f"the task module {path} does not import ({type(e).__name__}: {e}); fix it")
    interface = ("DEFAULTS", "VOCAB_SIZE", "BLOCK_SIZE", "get_batch", "score", "prompts", "show")
    data_dir = data_dir or os.path.join("data", dataset)
    if os.path.isdir(data_dir) or not all(hasattr(task, name) for name in interface):
        from machinery.errors import refuse_task
        refuse_task(dataset, path, data_dir, task, interface)  # one name, one thing; every name
    return task


def check_dataset(dataset, block, vocab_size):
    """data/<dataset>'s meta.json, once its token files are checked whole and of one preparation (at
    the start, not mid-training). vocab_size: the run's, or None (256 or less wants byte tokens)."""
    data_dir = os.path.join("data", dataset)
    try:  # a file missing, cut short (odd bytes, empty: ValueError), not JSON, of another vocab...
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        vocab = meta["vocab_size"]  # at most the run's (not GPT-2 tokens for a byte config)
        whole = type(vocab) is int and 1 <= vocab <= (vocab_size or vocab)
        for split in ("train", "val"):
            tokens = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
            # the counts and sums meta.json has (none: older datasets)
            counted = meta.get(f"{split}_tokens") in (None, len(tokens)) and len(tokens) > block
            summed = meta.get(f"{split}_token_sum") in (None, int(tokens.sum(dtype=np.uint64)))
            whole = whole and counted and summed and int(tokens.max()) < vocab
    except (OSError, ValueError, KeyError, TypeError):
        whole = False
    if not whole:  # ...: the one line that says which
        from machinery.errors import refuse_dataset
        refuse_dataset(dataset, block, vocab_size)
    return meta


def open_dataset(dataset, task, context_size, vocab_size, command):
    """(source, block, vocab_size, meta): the task module (generated_task's) or data/<dataset>
    (held till the run ends); a sequence's tokens; the run's, else the dataset's vocab_size;
    meta.json ({}: a task)."""
    if task is not None:
        if context_size < task.BLOCK_SIZE or (vocab_size or task.VOCAB_SIZE) < task.VOCAB_SIZE:
            from machinery.errors import task_misfit
            task_misfit(dataset, task, context_size, vocab_size)
        return task, task.BLOCK_SIZE, vocab_size or task.VOCAB_SIZE, {}
    source = os.path.join("data", dataset)
    if os.path.isdir(source):
        hold_folder(source, "--dataset", command, shared=True)
    meta = check_dataset(dataset, context_size, vocab_size)
    return source, context_size, vocab_size or meta["vocab_size"], meta


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
