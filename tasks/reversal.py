"""The sequence-reversal study's task, train.py's zero-setup demo (--dataset=reversal):
1..5 digits x (tokens 1..9) make [START] x [SEP] reversed(x) [PAD ...], the loss only
on reversed(x). Accuracy is measured on sequences held out of every run's training."""
import numpy as np
import torch

from machinery.process import fail

PAD = 0
START = 10
SEP = 11
VOCAB_SIZE = 12
MAX_LEN = 5
BLOCK_SIZE = 2 * MAX_LEN + 1  # a whole sequence (2 x 5 + 2) less its last token

# train.py's defaults here: the walk-through's 2 + 2 layers of 64 (235,328 params)
DEFAULTS = dict(n_layer=2, n_embed=64, n_head=4, seed=0, batch_size=32,
                gradient_accumulation_steps=1, max_iters=400, learning_rate=5e-4,
                min_lr=5e-5, warmup_iters=30, lr_decay_iters=400, eval_interval=50,
                eval_iters=4, context_size=BLOCK_SIZE, vocab_size=VOCAB_SIZE)


def split():
    """{length: (n_seq, length) array} of digit sequences: train, held-out."""
    rng = np.random.default_rng(0)  # not the run's seed: held out of every run
    train, held_out = {}, {}
    for n in range(1, MAX_LEN + 1):
        codes = rng.permutation(9 ** n)
        digits = codes[:, None] // 9 ** np.arange(n) % 9 + 1  # each code in base 9: 1..9
        k = min(200, int(0.1 * len(digits)))  # 0 of 9 one-digit sequences
        held_out[n] = digits[:k]
        train[n] = digits[k:]
    return train, held_out


SEQUENCES = dict(zip(("train", "val"), split()))  # {split name: {length: sequences}}


def encode(xs):
    """Sequences -> (inputs, targets), (B, BLOCK_SIZE); targets -1 but on reversed(x)."""
    seq = np.full((len(xs), BLOCK_SIZE + 1), PAD, dtype=np.int64)
    targets = np.full((len(xs), BLOCK_SIZE), -1, dtype=np.int64)
    for i, x in enumerate(xs):
        n = len(x)
        seq[i, :2 * n + 2] = [START, *x, SEP, *x[::-1]]
        targets[i, n + 1:2 * n + 1] = x[::-1]
    return torch.from_numpy(seq[:, :-1].copy()), torch.from_numpy(targets)


def batch_of(sequences, batch_size, rng):
    """A batch, lengths drawn uniformly (else the long sequences swamp the short)."""
    lengths = [n for n in sequences if len(sequences[n])]
    xs = [sequences[n][rng.integers(len(sequences[n]))]
          for n in rng.choice(lengths, size=batch_size)]
    return encode(xs)


def get_batch(split_name, size, rng):
    """A batch of size training ("train") or held-out ("val") sequences."""
    return batch_of(SEQUENCES[split_name], size, rng)


@torch.no_grad()
def accuracy(model, sequences, device, batch_size=1024):
    """Exact accuracy: after [START] x [SEP], greedy decoding writes reversed(x)."""
    was_training = model.training
    model.eval()
    correct = 0
    for n, all_xs in sequences.items():
        for i in range(0, len(all_xs), batch_size):  # prompts of one length
            xs = all_xs[i:i + batch_size]
            idx = encode(xs)[0][:, :n + 2].to(device)  # [START] x [SEP]
            for _ in range(n):
                logits = model(idx)[0]  # (B, 1, vocab): the next token's
                idx = torch.cat((idx, logits.argmax(-1)), dim=1)
            correct += (idx[:, -n:].cpu().numpy() == xs[:, ::-1]).all(axis=1).sum()
    model.train(was_training)
    return float(correct / sum(len(xs) for xs in sequences.values()))


def score(model, split_name, device):
    """(accuracy, number of sequences) on the held-out ("val") or train ones."""
    chosen = SEQUENCES[split_name]
    return accuracy(model, chosen, device), sum(len(xs) for xs in chosen.values())


def prompts(start, num_samples, seed):
    """sample.py's prompts [START] x [SEP] and answer lengths: start's, or random."""
    if start is None:
        rng = np.random.default_rng(seed)
        xs = [list(rng.integers(1, 10, size=rng.integers(1, MAX_LEN + 1)))
              for _ in range(num_samples)]
    else:
        digits = [int(c) for c in start if c in "123456789"]
        if not 1 <= len(digits) <= MAX_LEN or set(start.strip()) - set("123456789 ,"):
            fail(f"the reversal model takes 1 to {MAX_LEN} digits from 1 to 9, e.g. "
                 f"--start=\"3 5 4 2 1\"; got {start!r}")
        xs = [digits] * num_samples
    return [([START, *x, SEP], len(x)) for x in xs]


def show(prompt, answer):
    """A prompt and its answer as sample.py prints them: 3 5 4 -> 4 5 3."""
    digits = " ".join(str(int(d)) for d in prompt[1:-1])
    return digits + " -> " + " ".join(str(int(i)) for i in answer)
