r"""
The loss of a trained model over a whole text: every token once, the same figure on every run.

    python evaluate.py --out_dir=out/wikitext2_valid_gpt2c                 # the run's own val split
    python evaluate.py --out_dir=out/wikitext2_valid_gpt2c --split=train
    python evaluate.py --out_dir=out/wikitext2_valid_gpt2c --input=my.txt  # any text, its tokenizer
    python evaluate.py --out_dir=out/reversal                  # a generated task: held-out accuracy

--input is read as prepare_wikipedia.py reads it: a text file is UTF-8 text, its line endings as
\n, anything else (a NUL byte, as in a .bin token file, or bytes that are not UTF-8) refused, not
scored; a .jsonl file holds one article a line, {"pageid", "title", "text"}, and only their text
is scored.

The run's folder is all it needs for --input (the checkpoint carries the tokenizer); its own splits
are read from data/<dataset>/ in the working folder, else beside the run's folder or in a folder
above it (where it was trained), else in the repository's folder. A run on a generated task is
scored as train.py scores it: the share of its held-out sequences (--split=train: of those it
trained on) that greedy decoding answers exactly. With a compact vocabulary (the GPT-2 configs),
tokens that never occur in the training text have no id: they are left out of the text and counted
("tokens_outside_vocab"), as the training log's val_loss_seen_ids leaves out the val tokens whose id
never occurs in train.bin.

The tokens are cut into non-overlapping windows of context_size + 1 tokens that share their edge
token: window k reads tokens [kT, kT + T) and predicts tokens kT + 1 .. kT + T, so every token but
the first is predicted exactly once (the last window may be shorter). Each window starts with an
empty context, so the figure is a little above what a sliding window would give, and it does not
depend on the batch size.

Bits per byte = total nats / UTF-8 bytes of the predicted tokens / ln 2, with an end-of-text counted
as one byte: it compares models with different tokenizers (for byte tokens it is the loss / ln 2).
"""
import json
import math
import os
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

from configurator import add_flag, argument_parser
from data import check_dataset, load_task, prepare_hint, window_losses, window_starts
from machinery.checkpoints import load_checkpoint
from machinery.files import folder_chain
from machinery.hardware import pick_device
from machinery.process import fail, on_ctrl_c
from model import ModelConfig, build_model
from text import checkpoint_tokenizer, get_tokenizer, gpt2_encoding, read_articles, without_nul

REPOSITORY = os.path.dirname(os.path.abspath(__file__))


def find_dataset(dataset, out_dir):
    """The folder data/<dataset> of a run trained on it: in the working folder, else beside the
    run's folder or in a folder above it (where the run was trained), else in this repository's
    folder; None where none holds meta.json."""
    for folder in ["", *reversed(folder_chain(os.path.abspath(out_dir))), REPOSITORY]:
        if os.path.exists(os.path.join(folder, "data", dataset, "meta.json")):
            return os.path.join(folder, "data", dataset)
    return None

# -----------------------------------------------------------------------------
# the figures: loss, perplexity, bits per byte; a generated task's accuracy


def token_byte_lengths(meta):
    """UTF-8 bytes of each token id of the dataset's tokenizer; end-of-text counts as one byte."""
    if meta["tokenizer"] == "byte":
        return np.ones(meta["vocab_size"], dtype=np.int64)
    enc = gpt2_encoding()
    ids = meta.get("compact_vocab") or range(meta["vocab_size"])
    lengths = [1 if i == enc.eot_token else len(enc.decode_single_token_bytes(i)) for i in ids]
    return np.array(lengths, dtype=np.int64)


def summarize(losses, targets, byte_lengths, totals=None):
    """Loss, perplexity and bits per byte of losses on targets; with totals (nats, tokens, bytes so
    far, a float64 array), add this batch to them and summarise everything so far."""
    totals = np.zeros(3) if totals is None else totals
    totals += losses.sum(), len(losses), byte_lengths[targets].sum()
    nats, n, n_bytes = totals
    return {"loss": float(nats / n), "perplexity": math.exp(nats / n),
            "bits_per_byte": float(nats / n_bytes / math.log(2)), "tokens": int(n),
            "bytes": int(n_bytes)}


def task_accuracy(args, task, dataset, model, autocast):
    """A generated task's exact-answer accuracy by greedy decoding, as train.py logs it
    (val_accuracy): on the held-out sequences (--split=val) or on those it trained on."""
    if args.input:
        fail(f"a {dataset} model reads its task's sequences, not text: leave out --input; it is "
             f"scored on its held-out sequences (--split=val) or on those it trained on "
             f"(--split=train)")
    with autocast:
        accuracy, n = task.score(model, args.split, args.device)
    which = "held-out" if args.split == "val" else "training"
    result = {"out_dir": args.out_dir, "source": f"{dataset} {which} sequences",
              "accuracy": accuracy, "sequences": n}
    print(f"{result['source']}: accuracy {accuracy:.2%} ({round(accuracy * n):,} of {n:,} answered "
          f"exactly, by greedy decoding)")
    print(json.dumps(result))
    return result


def main(argv=None):
    parser = argument_parser(__doc__, "python evaluate.py")
    parser.add_argument("--out_dir", required=True,
                        help="the training run's folder, holding ckpt.pt")
    parser.add_argument("--split", default="val", choices=("train", "val"),
                        help="a split of the run's dataset, from data/<dataset>/ here, beside the "
                             "run or above it (a generated task: its held-out sequences, or those "
                             "it trained on)")
    parser.add_argument("--input", default=None,
                        help="a text file to evaluate instead, tokenized as prepare_wikipedia.py "
                             "would")
    parser.add_argument("--batch_size", type=int, default=16,
                        help="windows per forward pass (the result does not depend on it)")
    parser.add_argument("--device", default="auto",
                        help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="float32",
                        help="float32 (the figure of record), bfloat16, float16 or auto (as "
                             "train.py: faster on a GPU, a little less exact)")
    add_flag(parser, "--compile", "torch.compile the model's forward pass (on a GPU, for long "
                                  "texts)")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        fail(f"--batch_size={args.batch_size}: use a positive number")
    args.device, dtype = pick_device(args.device, args.dtype)

    checkpoint, model = load_checkpoint(args.out_dir, args.device,
                                        build=lambda config: build_model(ModelConfig(**config)))
    dataset = checkpoint["train_config"]["dataset"]
    meta = checkpoint["dataset_meta"]  # what it trained on: a task, or text and its tokenizer
    autocast = nullcontext()
    if dtype != "float32":
        autocast = torch.autocast(args.device.split(":")[0], getattr(torch, dtype))
    if "task" in meta:
        return task_accuracy(args, load_task(meta["task"]), dataset, model, autocast)
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    unknown = []  # the text's tokens outside a compact vocabulary
    encode, _, _, eot = checkpoint_tokenizer(checkpoint, ckpt_path, unknown)
    if args.compile:
        model.hidden_states = torch.compile(model.hidden_states)
    if args.input:
        # as prepare_wikipedia.py reads it: a text file (UTF-8 without NUL, else refused in one
        # line) cut into articles at its title lines, or a .jsonl file of articles
        articles = without_nul(read_articles(args.input))
        tokens = [np.zeros(0, np.uint16)]  # 2 bytes a token
        while articles:
            tokens.append(np.array(encode(articles.pop(0)["text"]) + [eot], np.uint16))
        tokens = np.concatenate(tokens)
        source = args.input
    else:
        data_dir = find_dataset(dataset, args.out_dir)
        if data_dir is None:
            hint = prepare_hint(dataset, meta["tokenizer"], "compact_vocab" in meta)
            fail(f"data/{dataset}/ not found here, beside {args.out_dir} or in a folder above it, "
                 f"nor in the repository's folder: evaluate where it is, prepare it with {hint}, "
                 f"or give any text with --input=FILE")
        # whole, and the tokens and text it was trained on: train.py's own check
        check_dataset(dataset, 0, model.config.vocab_size, meta, data_dir)
        source = os.path.join(data_dir, f"{args.split}.bin")
        tokens = np.memmap(source, dtype=np.uint16, mode="r")
    if len(tokens) < 2:
        fail(f"{source} has {len(tokens)} token(s): nothing to predict; give a longer text")

    block = model.config.context_size
    t0 = time.time()
    shown = [0.0]

    def progress(done, total):
        if time.time() - shown[0] > 5 or done == total:  # a line every few seconds on long texts
            shown[0] = time.time()
            eta = (time.time() - t0) / done * (total - done)
            print(f"\r{done}/{total} windows, {eta:.0f}s left", end="" if done < total else "\n",
                  file=sys.stderr, flush=True)

    totals = np.zeros(3)
    byte_lengths = token_byte_lengths(meta)
    for targets, losses in window_losses(model, tokens, block, args.batch_size, args.device,
                                         autocast=autocast, progress=progress):
        figures = summarize(losses, targets, byte_lengths, totals)
    result = {"out_dir": args.out_dir, "source": source, **figures,
              "tokens_outside_vocab": len(unknown),
              "windows": len(window_starts(len(tokens), block)), "context_size": block}
    print(f"{source}: loss {result['loss']:.4f} nats/token, perplexity {result['perplexity']:.2f}, "
          f"{result['bits_per_byte']:.4f} bits/byte over {result['tokens']:,} tokens "
          f"({result['bytes']:,} bytes)")
    print("(every token once; train.py logs as val loss the mean over eval_iters batches of "
          "windows at random places, so the two differ a little; with eval_iters=0 it logs this)")
    if unknown:  # no id, so no model of this vocabulary can read or predict them
        share = len(unknown) / (len(unknown) + len(tokens))
        print(f"left out: {len(unknown):,} tokens ({share:.2%}) outside the model's vocabulary of "
              f"{model.config.vocab_size:,} (the tokens of its training text), e.g. "
              f"{get_tokenizer(meta['tokenizer'])[1](unknown[:5])!r}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    on_ctrl_c("nothing was written; run the same command again", lower="--batch_size")
    main()
