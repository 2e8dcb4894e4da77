"""
Sample from a model trained by train.py (its out_dir/ckpt.pt), decoding with the dataset's tokenizer.

    python sample.py --out_dir=out --start="The history of" --num_samples=3 --max_new_tokens=200
    python sample.py --out_dir=out --start=FILE:prompt.txt
    python sample.py --out_dir=out-reversal --start="3 5 4 2 1"    # reversal: the digits to reverse
"""
import argparse
import json
import os
import sys
from contextlib import nullcontext

import torch

import reversal
from model import ModelConfig, build_model


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--out_dir", default="out", help="the training run's folder, holding ckpt.pt")
parser.add_argument("--start", default="\n", help="the prompt, or FILE:path to read it from a file")
parser.add_argument("--num_samples", type=int, default=3)
parser.add_argument("--max_new_tokens", type=int, default=300, help="tokens to generate (reversal: as many as digits)")
parser.add_argument("--temperature", type=float, default=0.8, help="below 1: more likely tokens, above 1: more random")
parser.add_argument("--top_k", type=int, default=None, help="sample only from the k most likely tokens (default 200; reversal: 1, greedy)")
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.error = lambda message: fail(f"{message} (see python sample.py --help)")  # one line, not argparse's usage block
args = parser.parse_args()
if args.temperature <= 0 or (args.top_k is not None and args.top_k < 1) or args.num_samples < 1 or args.max_new_tokens < 0:
    fail("use --temperature > 0, --top_k >= 1, --num_samples >= 1 and --max_new_tokens >= 0")

# the model
if args.device.startswith("cuda") and not torch.cuda.is_available():
    fail(f"device={args.device!r} but CUDA is not available here; use --device=cpu")
ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
if not os.path.exists(ckpt_path):
    fail(f"no checkpoint at {ckpt_path}; train one with train.py (its --out_dir), or point --out_dir at a run's folder")
try:
    checkpoint = torch.load(ckpt_path, map_location=args.device)
    model = build_model(ModelConfig(**checkpoint["model_config"]))
    model.load_state_dict(checkpoint["model"])
except Exception as e:
    fail(f"checkpoint {ckpt_path} is unreadable ({type(e).__name__}); use another run's --out_dir")
model.eval().to(args.device)
dataset = checkpoint["train_config"]["dataset"]
device_type = "cuda" if args.device.startswith("cuda") else "cpu"
autocast = torch.autocast(device_type, dtype=torch.bfloat16) if device_type == "cuda" and torch.cuda.is_bf16_supported() else nullcontext()

# the prompt, as tokens
start = args.start
if start.startswith("FILE:"):
    try:
        with open(start[5:], encoding="utf-8") as f:
            start = f.read()
    except OSError as e:
        fail(f"cannot read the prompt file {start[5:]} ({e.strerror})")
if dataset == "reversal":
    digits = [int(c) for c in start if c.isdigit()]
    if not 1 <= len(digits) <= reversal.MAX_LEN or 0 in digits or any(not (c.isdigit() or c in " ,") for c in start.strip()):
        fail(f"the reversal model takes 1 to {reversal.MAX_LEN} digits from 1 to 9, e.g. --start=\"3 5 4 2 1\"; got {start!r}")
    prompt = [reversal.START, *digits, reversal.SEP]
    max_new_tokens, top_k = len(digits), args.top_k or 1  # one right answer: greedy by default
    decode = lambda ids: " ".join(str(int(i)) for i in ids)
else:
    meta_path = os.path.join("data", dataset, "meta.json")
    if not os.path.exists(meta_path):
        fail(f"{meta_path} not found, so the tokenizer is unknown; run sample.py from the folder you trained in, or prepare '{dataset}' again")
    with open(meta_path) as f:
        meta = json.load(f)
    from prepare_wikipedia import get_tokenizer
    encode, decode, _, eot = get_tokenizer(meta["tokenizer"])
    prompt = encode(start) or [eot]  # an empty prompt starts a new article
    max_new_tokens, top_k = args.max_new_tokens, args.top_k or 200

# generate; prompts longer than the context keep their last context_size tokens
torch.manual_seed(args.seed)
x = torch.tensor(prompt, dtype=torch.long, device=args.device)[None, :].repeat(args.num_samples, 1)
with torch.no_grad(), autocast:
    y = model.generate(x, max_new_tokens, temperature=args.temperature, top_k=top_k)
for sample in y.tolist():
    if dataset == "reversal":
        print(f"{decode(digits)} -> {decode(sample[len(prompt):])}")
    else:
        print(decode(sample))
        print("-" * 40)
