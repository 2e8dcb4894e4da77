"""
The task of the sequence-reversal study ("Simple Transformer Implementation"), reversing 1..5
digits, posed as language modelling: the zero-setup quick start of train.py (--dataset=reversal).

A sequence x of 1..5 digits (tokens 1..9) becomes one training sequence
    [START] x [SEP] reversed(x) [PAD ...]        e.g. 10 3 5 4 11 4 5 3 0 0 0 0
and the loss is taken only where the model writes reversed(x). Every digit sequence of each length
is enumerated and a fixed part of each length is held out (same split for every run), so the
exact-sequence accuracy is measured on sequences the model never trained on.
"""
import functools

import numpy as np
import torch

from machinery.process import fail

PAD = 0
START = 10
SEP = 11
VOCAB_SIZE = 12
MAX_LEN = 5
BLOCK_SIZE = 2 * MAX_LEN + 1  # model input: the full sequence of 2 x 5 + 2 tokens without its last
SPLIT_SEED = 0  # the held-out sequences do not change with the training seed

# train.py uses these for the settings not given: the walk-through's small encoder-decoder (2 + 2
# layers of width 64, 235,328 parameters), its schedule and its first seed, so the quick start is
# seconds on a CPU and retraces, step for step, seed 0 of the notebook's "encdec + both". The
# write-up's shape, 13 + 13 of 150: config/reversal_paper.py.
DEFAULTS = dict(n_layer=2, n_embed=64, n_head=4, seed=0,
                batch_size=32, gradient_accumulation_steps=1, max_iters=400, learning_rate=5e-4,
                min_lr=5e-5, warmup_iters=30, lr_decay_iters=400, eval_interval=50, eval_iters=4,
                context_size=BLOCK_SIZE, vocab_size=VOCAB_SIZE)


def split(held_out_fraction=0.1, max_held_out=200, seed=SPLIT_SEED):
    """All digit sequences of each length, split into {length: (n_seq, length) array} for train and
    held-out."""
    rng = np.random.default_rng(seed)
    train = {}
    held_out = {}
    for n in range(1, MAX_LEN + 1):
        codes = rng.permutation(9 ** n)
        digits = codes[:, None] // 9 ** np.arange(n) % 9 + 1  # each code in base 9, digits 1..9
        # none of the 9 one-digit sequences
        k = min(max_held_out, int(held_out_fraction * len(digits)))
        held_out[n] = digits[:k]
        train[n] = digits[k:]
    return train, held_out


@functools.lru_cache(maxsize=None)
def sequences(split_name):
    """The training sequences ("train") or the held-out ones ("val")."""
    train, held_out = split()
    if split_name == "train":
        return train
    if split_name == "val":
        return held_out
    raise ValueError(f"split {split_name!r}: use 'train' or 'val'")


def encode(xs):
    """Digit sequences -> (inputs, targets), both (B, BLOCK_SIZE) int64; targets are -1 except on
    reversed(x)."""
    seq = np.full((len(xs), BLOCK_SIZE + 1), PAD, dtype=np.int64)
    targets_mask = np.zeros((len(xs), BLOCK_SIZE), dtype=bool)
    for i, x in enumerate(xs):
        n = len(x)
        seq[i, :2 * n + 2] = [START, *x, SEP, *x[::-1]]
        # inputs SEP .. second-to-last reversed digit predict reversed(x)
        targets_mask[i, n + 1:2 * n + 1] = True
    inputs = seq[:, :-1]
    targets = np.where(targets_mask, seq[:, 1:], -1)
    return torch.from_numpy(inputs.copy()), torch.from_numpy(targets)


def batch_of(sequences, batch_size, rng):
    """A batch with lengths drawn uniformly (long sequences would otherwise swamp the short ones).
    """
    lengths = [n for n in sequences if len(sequences[n])]
    xs = []
    for n in rng.choice(lengths, size=batch_size):
        xs.append(sequences[n][rng.integers(len(sequences[n]))])
    return encode(xs)


def get_batch(split_name, size, rng):
    """A batch of `size` training ("train") or held-out ("val") sequences, drawn by rng."""
    return batch_of(sequences(split_name), size, rng)


@torch.no_grad()
def accuracy(model, sequences, device, batch_size=1024):
    """Exact-sequence accuracy: after [START] x [SEP], greedy decoding must write reversed(x)
    exactly."""
    was_training = model.training
    model.eval()
    correct = 0
    total = 0
    for n, all_xs in sequences.items():
        for i in range(0, len(all_xs), batch_size):  # prompts of one length
            xs = all_xs[i:i + batch_size]
            prompt = np.concatenate([np.full((len(xs), 1), START), xs, np.full((len(xs), 1), SEP)],
                                    axis=1)
            idx = torch.from_numpy(prompt).to(device)
            for _ in range(n):  # greedy: append the most likely next token, n times
                logits = model(idx)[0]  # (B, 1, vocab): the next token's
                idx = torch.cat((idx, logits.argmax(-1)), dim=1)
            correct += (idx[:, -n:].cpu().numpy() == xs[:, ::-1]).all(axis=1).sum()
            total += len(xs)
    model.train(was_training)
    return float(correct / total)


def score(model, split_name, device):
    """(accuracy, number of sequences) on the held-out sequences ("val") or the training ones."""
    chosen = sequences(split_name)
    return accuracy(model, chosen, device), sum(len(xs) for xs in chosen.values())


def prompts(start, num_samples, seed):
    """sample.py's prompts [START] x [SEP], each with the number of tokens to generate: the digits
    of `start` (e.g. "3 5 4 2 1"), or num_samples random digit sequences."""
    if start is None:
        rng = np.random.default_rng(seed)
        xs = [list(rng.integers(1, 10, size=rng.integers(1, MAX_LEN + 1)))
              for _ in range(num_samples)]
    else:
        digits = [int(c) for c in start if c in "0123456789"]  # not '²', which isdigit() accepts
        other = any(c not in "0123456789 ," for c in start.strip())
        if not 1 <= len(digits) <= MAX_LEN or 0 in digits or other:
            fail(f"the reversal model takes 1 to {MAX_LEN} digits from 1 to 9, e.g. "
                 f"--start=\"3 5 4 2 1\"; got {start!r}")
        xs = [digits] * num_samples
    return [([START, *x, SEP], len(x)) for x in xs]


def show(prompt, answer):
    """A prompt and its answer as sample.py prints them: 3 5 4 -> 4 5 3."""
    digits = " ".join(str(int(d)) for d in prompt[1:-1])
    return digits + " -> " + " ".join(str(int(i)) for i in answer)
