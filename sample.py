"""
Sample from a model trained by train.py (its out_dir/ckpt.pt), decoding with the dataset's
tokenizer, which the checkpoint carries: only the run's folder is needed, from any working folder.

    python sample.py --out_dir=out/wikitext2_valid_byte --start="The history of" --num_samples=3
    python sample.py --out_dir=out/wikitext2_valid_byte --start=FILE:prompt.txt --top_p=0.9
    python sample.py --out_dir=out/reversal --start="3 5 4 2 1"  # a generated task: its prompt
    python sample.py --out_dir=out/reversal                      # ... or random prompts

A sample ends at the end of its article (the end-of-text token) or after --max_new_tokens.
"""
import glob
import math
import os
import sys
from contextlib import nullcontext

import torch

from configurator import add_flag, argument_parser
from data import load_task
from machinery.checkpoints import load_checkpoint
from machinery.hardware import pick_device
from machinery.process import fail, on_ctrl_c
from model import ModelConfig, build_model
from text import checkpoint_tokenizer, get_tokenizer

on_ctrl_c("stopped sampling", lower="--num_samples or --max_new_tokens")

parser = argument_parser(__doc__, "python sample.py")
parser.add_argument("--out_dir", default=None,
                    help="the training run's folder, holding ckpt.pt (default: the one out/*/ "
                         "folder here, named as it starts)")
parser.add_argument("--start", default=None,
                    help="the prompt, or FILE:path to read it from a file (default: a new line; a "
                         "generated task: a random prompt per sample)")
parser.add_argument("--num_samples", type=int, default=3,
                    help="samples to draw, each from the same prompt")
parser.add_argument("--max_new_tokens", type=int, default=300,
                    help="tokens to generate (a generated task: as many as its answer has)")
parser.add_argument("--temperature", type=float, default=0.8,
                    help="below 1: more likely tokens, above 1: more random; near 0: the most "
                         "likely, as --top_k=1")
parser.add_argument("--top_k", type=int, default=None,
                    help="sample only from the k most likely tokens (default 200; a generated "
                         "task: 1, greedy, unless --top_p is given)")
parser.add_argument("--top_p", type=float, default=None,
                    help="sample only from the fewest most likely tokens whose probabilities add "
                         "up to p, e.g. 0.9 (nucleus sampling; default: off)")
add_flag(parser, "--stop_at_eot", "end a sample at the end of its article, the end-of-text token "
                                  "(default True; False: run on into new articles)", default=True)
parser.add_argument("--seed", type=int, default=1337, help="random seed of the samples")
parser.add_argument("--device", default="auto",
                    help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
parser.add_argument("--dtype", default="auto",
                    help="auto (bfloat16 on a GPU that has it, float16 on an older one, float32 "
                         "elsewhere), float32, bfloat16 or float16")
args = parser.parse_args()
checks = (  # setting, is the value allowed?, what to use instead
    ("temperature", 0 < args.temperature < math.inf, "use a number above 0, e.g. 0.8"),
    ("top_k", args.top_k is None or args.top_k >= 1, "use 1 or more"),
    ("top_p", args.top_p is None or 0 < args.top_p <= 1, "use a number in (0, 1], e.g. 0.9"),
    # greedy: top_p would do nothing
    ("top_p", args.top_p in (None, 1) or args.top_k != 1,
     "--top_k=1 keeps only the most likely token; leave out one of them"),
    ("num_samples", args.num_samples >= 1, "use 1 or more"),
    ("max_new_tokens", args.max_new_tokens >= 0, "use 0 or more"),
    ("seed", 0 <= args.seed < 2 ** 63, "use an integer from 0 to 2**63 - 1"),
)
for name, allowed, fix in checks:
    if not allowed:
        fail(f"{name}={getattr(args, name)!r} is not allowed; {fix}")
top_p = args.top_p if args.top_p != 1 else None  # 1: every token, as without it
# logits / temperature overflow float32 below 1e-30; the limit is greedy all the same
temperature = max(args.temperature, 1e-30)

# the model
args.device, dtype = pick_device(args.device, args.dtype)
named = ""  # the run, where it was not given: said once the prompt has passed its checks
if args.out_dir is None:  # train.py's default folders are out/<dataset>
    runs = sorted(os.path.dirname(path) for path in glob.glob(os.path.join("out", "*", "ckpt.pt")))
    if not runs:
        fail("no trained model here (out/*/ckpt.pt): train one first, e.g. the quick start's "
             "`python train.py --dataset=reversal`, or give a run's folder with --out_dir")
    if len(runs) > 1:
        fail(f"several runs here ({', '.join(runs)}); give the run's folder with --out_dir")
    args.out_dir = runs[0]
    named = f"sampling {args.out_dir}, the one run here (--out_dir picks another)\n"
ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
checkpoint, model = load_checkpoint(args.out_dir, args.device,
                                    build=lambda config: build_model(ModelConfig(**config)))
device_type = args.device.split(":")[0]
autocast = nullcontext()
if dtype != "float32":
    autocast = torch.autocast(device_type, dtype=getattr(torch, dtype))

# the prompt
start = args.start
if start is not None and start.startswith("FILE:"):
    path = start[5:]
    try:  # a megabyte at most: a context holds far less, and a file such as /dev/zero has no end
        with open(path, "rb") as f:
            start = f.read(2 ** 20 + 1)
    except OSError as e:
        fail(f"cannot read the prompt file {path} ({e.strerror})")
    if len(start) > 2 ** 20:
        fail(f"the prompt file {path} holds more than a megabyte; the model reads only the last "
             f"context_size tokens of a prompt: give those")
    try:
        start = start.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(f"the prompt file {path} is not UTF-8 text (byte {e.start}); give a text file")
if start is not None:
    try:
        start.encode("utf-8")
    # bytes that are not UTF-8 arrive from the command line as surrogates
    except UnicodeEncodeError:
        fail("the prompt is not valid UTF-8 text; give it as UTF-8, or from a file with "
             "--start=FILE:path")
torch.manual_seed(args.seed)

meta = checkpoint["dataset_meta"]  # what it trained on: a task, or text and its tokenizer
if "task" in meta:  # a generated task has one right answer: greedy, unless --top_p asks to sample
    task = load_task(meta["task"])
    top_k = args.top_k or (None if top_p else 1)
    greedy = top_k == 1
    # greedy decoding of one prompt has one answer
    num_samples = 1 if greedy and start is not None else args.num_samples
    prompts = task.prompts(start, num_samples, args.seed)
    print(named, end="", file=sys.stderr)
    for prompt, answer_length in prompts:
        x = torch.tensor(prompt, dtype=torch.long, device=args.device)[None, :]
        with torch.no_grad(), autocast:
            y = model.generate(x, answer_length, temperature=temperature, top_k=top_k,
                               top_p=top_p)
        print(task.show(prompt, y[0, x.shape[1]:].tolist()))
    sys.exit(0)

unknown = []  # the prompt's tokens outside a compact vocabulary
encode, decode, n_vocab, eot = checkpoint_tokenizer(checkpoint, ckpt_path, unknown)
prompt = encode("\n" if start is None else start)
# "The" is not " The": the training text has a space before each word, so the prompt's first word
# may be unknown
if unknown and start and not start[0].isspace():
    unknown.clear()
    prompt = encode(" " + start)
    if not unknown:
        print(f"note: sampling from {' ' + start[:40]!r}: {start.split()[0]!r} without the space "
              f"before it is not in this model's vocabulary, the tokens of its training text",
              file=sys.stderr)
if unknown:
    unknown_text = get_tokenizer(meta["tokenizer"])[1](unknown[:5])
    fail(f"the prompt has {len(unknown)} token(s) outside this model's vocabulary of {n_vocab} "
         f"(the tokens of its training text), e.g. {unknown_text!r}; use words of that text")
skip = 0 if prompt else 1  # an empty prompt starts a new article: its end-of-text is not printed
prompt = prompt or [eot]
print(named, end="", file=sys.stderr)
if len(prompt) > model.config.context_size:  # generate reads the last context_size tokens
    print(f"note: the prompt's {len(prompt)} tokens are more than the model's context of "
          f"{model.config.context_size}: it reads the last {model.config.context_size}",
          file=sys.stderr)
x = torch.tensor(prompt, dtype=torch.long, device=args.device)[None, :]
x = x.repeat(args.num_samples, 1)
with torch.no_grad(), autocast:
    y = model.generate(x, args.max_new_tokens, temperature=temperature, top_k=args.top_k or 200,
                       top_p=top_p, stop_token=eot if args.stop_at_eot else None)
# control characters (an untrained byte model draws them) as escapes, not as codes for the terminal
controls = {c: f"\\x{c:02x}" for c in (*range(32), 127) if chr(c) not in "\n\t"}
for sample in y.tolist():
    new = sample[len(prompt):]
    if args.stop_at_eot and eot in new:
        new = new[:new.index(eot)]
    print(decode(sample[skip:len(prompt)] + new).translate(controls))
    print("-" * 40)
