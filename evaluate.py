"""A trained model's loss on a whole text, every token once: one figure.

    python evaluate.py --out_dir=out/cpu_baseline  # its val split
    python evaluate.py --out_dir=out/cpu_baseline --input=my.txt  # any text
    python evaluate.py --out_dir=out/reversal  # a task: held-out accuracy

Window k reads tokens [kT, kT + T) and predicts kT + 1 .. kT + T
(T: context_size): every token but the first once, whatever the batch size.
Bits per byte compares tokenizers. Tokens outside a compact vocabulary
are left out, and counted."""
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from configurator import add_flag, argument_parser
from data import check_dataset, load_task, prepare_command, window_losses, window_starts
from machinery.checkpoints import load_checkpoint
from machinery.files import hold_folder, release_folder
from machinery.hardware import pick_device
from machinery.process import fail, on_ctrl_c
from model import ModelConfig, build_model
from text import checkpoint_tokenizer, get_tokenizer, gpt2_encoding, read_articles


def token_byte_lengths(meta):
    """The UTF-8 bytes of each token id; end-of-text: one byte."""
    if meta["tokenizer"] == "byte":
        return np.ones(meta["vocab_size"], np.int64)
    enc = gpt2_encoding()
    ids = meta.get("compact_vocab") or range(meta["vocab_size"])
    return np.array([1 if i == enc.eot_token else len(enc.decode_single_token_bytes(i))
                     for i in ids], np.int64)


def main(argv=None):
    parser = argument_parser(__doc__, "python evaluate.py")
    add = parser.add_argument
    add("--out_dir", required=True, help="the run's folder, holding ckpt.pt")
    add("--split", default="val", choices=("train", "val"),
        help="the split of data/<dataset>/ (a task: its sequences)")
    add("--input", help="a UTF-8 text file instead")
    add("--batch_size", type=int, default=16, help="windows per forward pass")
    add("--device", default="auto", help="auto, cpu, cuda[:N], mps")
    add("--dtype", default="float32", help="float32, bfloat16, float16, auto")
    add_flag(parser, "--compile", "torch.compile the model (a GPU, long texts)")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        fail(f"--batch_size={args.batch_size}: use 1 or more")
    args.device, dtype = pick_device(args.device, args.dtype)
    checkpoint, model = load_checkpoint(
        args.out_dir, args.device, build=lambda c: build_model(ModelConfig(**c)))
    dataset = checkpoint["train_config"]["dataset"]
    meta = checkpoint["dataset_meta"]
    autocast = torch.autocast(args.device.split(":")[0], getattr(torch, dtype),
                              enabled=dtype != "float32")

    if "task" in meta:  # train.py's val_accuracy
        if args.input:
            fail(f"a {dataset} run scores its task's sequences: leave out --input")
        with autocast:
            accuracy, n = load_task(meta["task"]).score(model, args.split, args.device)
        which = "held-out" if args.split == "val" else "training"
        source = f"{dataset} {which} sequences"
        result = {"out_dir": args.out_dir, "source": source,
                  "accuracy": accuracy, "sequences": n}
        print(f"{source}: accuracy {accuracy:.2%} ({round(accuracy * n):,} of {n:,} "
              "answered exactly, by greedy decoding)")
        print(json.dumps(result))
        return result

    unknown = []  # the text's tokens outside a compact vocabulary
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    encode, _, _, eot = checkpoint_tokenizer(checkpoint, ckpt_path, unknown)
    if args.compile:
        model.hidden_states = torch.compile(model.hidden_states)
    if args.input:
        articles = read_articles(args.input)
        tokens = [np.array(encode(a["text"]) + [eot], np.uint16) for a in articles]
        tokens = np.concatenate([np.zeros(0, np.uint16), *tokens])
        source = args.input
    else:
        out_dir = Path(os.path.abspath(args.out_dir))
        folders = ["", out_dir, *out_dir.parents, os.path.dirname(os.path.abspath(__file__))]
        found = [os.path.join(f, "data", dataset) for f in folders
                 if os.path.exists(os.path.join(f, "data", dataset, "meta.json"))]
        if not found:
            hint = prepare_command(dataset, False, meta["tokenizer"], "compact_vocab" in meta)
            fail(f"data/{dataset}/ not found here, above {args.out_dir} or in the "
                 f"repository: prepare it (`{hint}`) or give --input=FILE")
        hold_folder(found[0], "--dataset", "evaluate.py", shared=True)
        check_dataset(dataset, 0, model.config.vocab_size, meta, found[0])
        source = os.path.join(found[0], f"{args.split}.bin")
        tokens = np.memmap(source, dtype=np.uint16, mode="r")
    if len(tokens) < 2:
        fail(f"{source} has {len(tokens)} token(s): nothing to predict; give more")

    block = model.config.context_size
    totals = np.zeros(3)  # nats, tokens, bytes
    byte_lengths = token_byte_lengths(meta)
    for targets, losses in window_losses(
            model, tokens, block, args.batch_size, args.device, autocast=autocast):
        totals += losses.sum(), len(losses), byte_lengths[targets].sum()
    release_folder(os.path.dirname(source))  # main may be called again
    nats, n, n_bytes = totals
    result = {"out_dir": args.out_dir, "source": source,
              "loss": nats / n, "perplexity": math.exp(nats / n),
              "bits_per_byte": nats / n_bytes / math.log(2),
              "tokens": int(n), "bytes": int(n_bytes),
              "tokens_outside_vocab": len(unknown),
              "windows": len(window_starts(len(tokens), block)), "context_size": block}
    print("{source}: loss {loss:.4f} nats/token, perplexity {perplexity:.2f}, "
          "{bits_per_byte:.4f} bits/byte, {tokens:,} tokens ({bytes:,} bytes)".format(**result))
    print("(every token once; train.py's val loss, a mean over eval_iters batches "
          "of random windows, differs a little; with eval_iters=0 it is this)")
    if unknown:
        share = len(unknown) / (len(unknown) + len(tokens))
        shown = get_tokenizer(meta["tokenizer"])[1](unknown[:5])
        print(f"left out: {len(unknown):,} tokens ({share:.2%}) outside the model's "
              f"vocabulary of {model.config.vocab_size:,}, e.g. {shown!r}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    on_ctrl_c("nothing was written; run the command again", lower="--batch_size")
    main()
