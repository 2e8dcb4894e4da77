"""
Sample from a model trained by train.py (its out_dir/ckpt.pt), decoding with the dataset's tokenizer.

    python sample.py --out_dir=out-wikipedia --start="The history of" --num_samples=3 --max_new_tokens=200
    python sample.py --out_dir=out-wikipedia --start=FILE:prompt.txt
    python sample.py --out_dir=out-reversal --start="3 5 4 2 1"    # reversal: the digits to reverse
    python sample.py --out_dir=out-reversal                        # reversal: random digit sequences
"""
import argparse
import glob
import math
import os
from contextlib import nullcontext

import numpy as np
import torch

import reversal
from configurator import fail, on_ctrl_c, pick_device
from data import check_same_data, get_tokenizer, load_checkpoint, read_meta

on_ctrl_c("stopped sampling", lower="--num_samples or --max_new_tokens", compile_off="leave out --compile")

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--out_dir", default=None,
                    help="the training run's folder, holding ckpt.pt (default: the one out-*/ folder here)")
parser.add_argument("--start", default=None, help="the prompt, or FILE:path to read it from a file "
                                                  "(default: a new line; reversal: a random digit sequence per sample)")
parser.add_argument("--num_samples", type=int, default=3)
parser.add_argument("--max_new_tokens", type=int, default=300, help="tokens to generate (reversal: as many as digits)")
parser.add_argument("--temperature", type=float, default=0.8, help="below 1: more likely tokens, above 1: more random")
parser.add_argument("--top_k", type=int, default=None,
                    help="sample only from the k most likely tokens (default 200; reversal: 1, greedy)")
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
parser.add_argument("--compile", action="store_true", help="torch.compile the one-token decoding step")
parser.error = lambda message: fail(f"{message} (see python sample.py --help)")  # one line, not argparse's usage block
args = parser.parse_args()
for name, allowed, fix in (("temperature", 0 < args.temperature < math.inf, "use a number above 0, e.g. 0.8"),
                           ("top_k", args.top_k is None or args.top_k >= 1, "use 1 or more"),
                           ("num_samples", args.num_samples >= 1, "use 1 or more"),
                           ("max_new_tokens", args.max_new_tokens >= 0, "use 0 or more"),
                           ("seed", 0 <= args.seed < 2 ** 63, "use an integer from 0 to 2**63 - 1")):
    if not allowed:
        fail(f"{name}={getattr(args, name)!r} is not allowed; {fix}")

# the model
args.device, dtype = pick_device(args.device, "auto")
if args.out_dir is None:  # train.py's default folders are out-<dataset>
    runs = sorted(os.path.dirname(path) for path in glob.glob("out-*/ckpt.pt"))
    if len(runs) != 1:
        found = f"several runs here ({', '.join(runs)})" if runs else "no out-*/ckpt.pt here"
        fail(f"{found}; give the run's folder with --out_dir")
    args.out_dir = runs[0]
ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
checkpoint, model = load_checkpoint(args.out_dir, args.device)
dataset = checkpoint["train_config"]["dataset"]
device_type = args.device.split(":")[0]
autocast = nullcontext() if dtype == "float32" else torch.autocast(device_type, dtype=getattr(torch, dtype))

# the prompt
start = args.start
if start is not None and start.startswith("FILE:"):
    try:
        with open(start[5:], encoding="utf-8") as f:
            start = f.read()
    except OSError as e:
        fail(f"cannot read the prompt file {start[5:]} ({e.strerror})")
    except UnicodeDecodeError as e:
        fail(f"the prompt file {start[5:]} is not UTF-8 text (byte {e.start}); give a text file")
if start is not None:
    try:
        start.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive from the command line as lone surrogates
        fail("the prompt is not valid UTF-8 text; give it as UTF-8, or from a file with --start=FILE:path")
torch.manual_seed(args.seed)

if dataset == "reversal":
    if start is None:  # a random digit sequence per sample
        rng = np.random.default_rng(args.seed)
        prompts = [list(rng.integers(1, 10, size=rng.integers(1, reversal.MAX_LEN + 1)))
                   for _ in range(args.num_samples)]
    else:
        digits = [int(c) for c in start if c.isdigit()]
        other = any(not (c.isdigit() or c in " ,") for c in start.strip())
        if not 1 <= len(digits) <= reversal.MAX_LEN or 0 in digits or other:
            fail(f"the reversal model takes 1 to {reversal.MAX_LEN} digits from 1 to 9, e.g. --start=\"3 5 4 2 1\"; "
                 f"got {start!r}")
        prompts = [digits] * (args.num_samples if args.top_k not in (None, 1) else 1)  # greedy has one answer
    for digits in prompts:  # one right answer: greedy by default
        x = torch.tensor([reversal.START, *digits, reversal.SEP], dtype=torch.long, device=args.device)[None, :]
        with torch.no_grad(), autocast:
            y = model.generate(x, len(digits), temperature=args.temperature, top_k=args.top_k or 1,
                               compile=args.compile)
        print(" ".join(map(str, digits)) + " -> " + " ".join(str(int(i)) for i in y[0, x.shape[1]:]))
else:
    meta = read_meta(dataset)
    tokenizer, meta_path = meta["tokenizer"], os.path.join("data", dataset, "meta.json")
    encode, decode, n_vocab, eot = get_tokenizer(tokenizer, meta.get("compact_vocab"))
    trained = checkpoint.get("dataset_meta", {}).get("tokenizer", tokenizer)  # older checkpoints do not say
    if tokenizer != trained or n_vocab > model.config.vocab_size:
        fail(f"{meta_path} says the {tokenizer} tokenizer ({n_vocab} tokens), but the model in {ckpt_path} was "
             f"trained on {trained} tokens (vocab_size={model.config.vocab_size}); "
             f"prepare data/{dataset} as it was for training")
    check_same_data(checkpoint, meta, dataset)
    prompt = encode("\n" if start is None else start)
    skip = 0 if prompt else 1  # an empty prompt starts a new article: its end-of-text token is not printed
    prompt = prompt or [eot]
    # generate; prompts longer than the context keep their last context_size tokens
    x = torch.tensor(prompt, dtype=torch.long, device=args.device)[None, :].repeat(args.num_samples, 1)
    with torch.no_grad(), autocast:
        y = model.generate(x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k or 200,
                           compile=args.compile)
    for sample in y.tolist():
        print(decode(sample[skip:]))
        print("-" * 40)
