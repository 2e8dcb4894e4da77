"""
Sample from a train.py run: its folder is all it needs (ckpt.pt has the tokenizer).

    python sample.py --out_dir=out/cpu_baseline --start="The history of"
    python sample.py --out_dir=out/cpu_baseline --start=FILE:a.txt --top_p=0.9
    python sample.py --out_dir=out/reversal --start="3 5 4 2 1"  # a task
"""
import glob
import os
import sys

import torch

from configurator import add_flag, argument_parser
from data import load_task
from machinery.checkpoints import load_checkpoint
from machinery.hardware import pick_device
from machinery.process import fail, on_ctrl_c
from model import ModelConfig, build_model
from text import checkpoint_tokenizer, get_tokenizer, read_text

on_ctrl_c("stopped sampling", lower="--num_samples or --max_new_tokens")

parser = argument_parser(__doc__, "python sample.py")
add = parser.add_argument
add("--out_dir", help="the run's folder (default: the one out/*/ here)")
add("--start", help="the prompt, or FILE:path (default: a new line; a task's: random)")
add("--num_samples", type=int, default=3, help="samples drawn from the prompt")
add("--max_new_tokens", type=int, default=300, help="tokens to generate, at most")
add("--temperature", type=float, default=0.8, help="lower: likelier; higher: freer")
add("--top_k", type=int, help="draw from the k likeliest (default 200; a task: 1)")
add("--top_p", type=float, help="draw from the likeliest tokens adding up to p")
add_flag(parser, "--stop_at_eot", "end a sample at its article's end", default=True)
add("--seed", type=int, default=1337, help="random seed of the samples")
add("--device", default="auto", help="auto (cuda, mps or cpu), cpu, cuda[:N], mps")
add("--dtype", default="auto", help="auto (half on a GPU), float32, bfloat16, float16")
args = parser.parse_args()
checks = (  # setting, refused?, what to use instead
    ("temperature", not 0 < args.temperature < float("inf"), "use one above 0"),
    ("top_k", args.top_k is not None and args.top_k < 1, "use 1 or more"),
    ("top_p", args.top_p is not None and not 0 < args.top_p <= 1, "use one in (0, 1]"),
    ("top_p", args.top_k == 1 and args.top_p is not None, "drop it or --top_k=1"),
    ("max_new_tokens", args.max_new_tokens < 0, "use 0 or more"),
    ("num_samples", args.num_samples < 1, "use 1 or more"),
    ("seed", not 0 <= args.seed < 2 ** 63, "use 0 to 2**63 - 1"),
)
for name, refused, fix in checks:
    if refused:
        fail(f"{name}={getattr(args, name)!r} is not allowed; {fix}")
# logits / temperature overflow float32 below 1e-30, where it is greedy anyway
temperature = max(args.temperature, 1e-30)

start = args.start
if start and start.startswith("FILE:"):
    start = read_text(start[5:], 1 << 20)  # a megabyte: more than a context
try:  # an argument's bytes that are not UTF-8 are surrogates here
    (start or "").encode("utf-8")
except UnicodeEncodeError:
    fail(f"the prompt {start!r} is not UTF-8 text; give UTF-8")

args.device, dtype = pick_device(args.device, args.dtype)
# the run found, said after the checks (an error is one line)
named = ""
if args.out_dir is None:  # train.py's default: out/<dataset>
    runs = sorted(map(os.path.dirname, glob.glob(os.path.join("out", "*", "ckpt.pt"))))
    if len(runs) != 1:
        fail(f"{len(runs) or 'no'} trained models here (out/*/ckpt.pt): give --out_dir, "
             "or train one first, e.g. `python train.py --dataset=reversal`")
    args.out_dir = runs[0]
    named = f"sampling {args.out_dir}, the one run here (--out_dir picks another)\n"
checkpoint, model = load_checkpoint(
    args.out_dir, args.device, build=lambda c: build_model(ModelConfig(**c)))
autocast = torch.autocast(args.device.split(":")[0], getattr(torch, dtype),
                          enabled=dtype != "float32")
torch.manual_seed(args.seed)

meta = checkpoint["dataset_meta"]
if "task" in meta:
    # one right answer: greedy (once a prompt), unless --top_p
    task = load_task(meta["task"])
    top_k = args.top_k or (None if args.top_p else 1)
    num_samples = 1 if top_k == 1 and start is not None else args.num_samples
    prompts = task.prompts(start, num_samples, args.seed)
    print(named, end="", file=sys.stderr)
    for prompt, answer_length in prompts:
        x = torch.tensor([prompt], device=args.device)
        with torch.no_grad(), autocast:
            y = model.generate(x, answer_length, temperature, top_k, args.top_p)
        print(task.show(prompt, y[0, len(prompt):].tolist()))
    sys.exit(0)

unknown = []  # the prompt's tokens outside a compact vocabulary
ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
encode, decode, n_vocab, eot = checkpoint_tokenizer(checkpoint, ckpt_path, unknown)
prompt = encode("\n" if start is None else start)
# the text's words follow a space: "The" may be unknown, " The" not
if unknown and start and not start[0].isspace():
    unknown.clear()
    prompt = encode(" " + start)
    if not unknown:
        print(f"note: sampling from {' ' + start[:40]!r}, with a space before it, "
              "as in the training text", file=sys.stderr)
if unknown:
    shown = get_tokenizer(meta["tokenizer"])[1](unknown[:5])
    fail(f"the prompt has {len(unknown)} token(s) outside the model's vocabulary of "
         f"{n_vocab}, e.g. {shown!r}; use words of its training text")
# no prompt: a new article, its end of text unshown
skip = 0 if prompt else 1
prompt = prompt or [eot]
print(named, end="", file=sys.stderr)
stop = eot if args.stop_at_eot else None
x = torch.tensor([prompt] * args.num_samples, device=args.device)
with torch.no_grad(), autocast:
    y = model.generate(x, args.max_new_tokens, temperature, args.top_k or 200,
                       args.top_p, stop)
# control characters (an untrained byte model draws them) as escapes
controls = {c: f"\\x{c:02x}" for c in (*range(32), 127) if chr(c) not in "\n\t"}
for new in y[:, len(prompt):].tolist():
    new = new[:new.index(eot)] if stop is not None and eot in new else new
    print(decode(prompt[skip:] + new).translate(controls))
    print("-" * 40)
