"""
The one line for an error a normal run never meets, imported only where one occurs: a device this
machine has not got, a failed torch.compile, a DDP step that cannot be shared out, a peer gone; a
setting or config file the configurator cannot take; a dataset missing or broken (with the command
that prepares it: prepare_hint), a task that does not fit; a fresh run over an earlier one; and
what the default run is, where its data is not prepared (introduce_run).
"""
import math
import os
import re
import sys

import torch

from machinery.process import fail

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGURATOR = os.path.join(REPOSITORY, "configurator.py")  # config_error leaves out its frames


def device_error(device, dtype, resumed_from):
    """pick_device's one line for a device or dtype not allowed, or not on this machine
    (resumed_from: the checkpoint that ran with them)."""
    where = ""  # a resume names the checkpoint that ran with them
    if resumed_from:
        where = f"{resumed_from} ran with device={device!r}, dtype={dtype!r}; here "
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        fail(f"device={device!r} is not allowed; use --device=cpu, cuda, cuda:N, mps or auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        fail(f"{where}device={device!r} but CUDA is not available here; use --device=auto or "
             f"--device=cpu")
    if device.startswith("cuda") and int(device[5:] or 0) >= torch.cuda.device_count():
        fail(f"{where}device={device!r} but there are only {torch.cuda.device_count()} CUDA "
             f"devices; use --device=cuda:0")
    if device == "mps" and not torch.backends.mps.is_available():
        fail(f"{where}device='mps' but MPS (the GPU of Apple silicon) is not available here; use "
             f"--device=auto or --device=cpu")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not allowed; use --dtype=auto, float32, bfloat16 or float16")
    fail(f"{where}dtype={dtype!r} on mps is not supported here; use --dtype=float32 or "
         f"--dtype=auto")


def compile_failure(error, compile_off="use --compile=False"):
    """The one line for a torch.compile that failed, whatever the torch release and the error's
    class."""
    # BackendCompilerFailed: the backend's own error
    while getattr(error, "inner_exception", None) is not None:
        error = error.inner_exception
    detail = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
    no_compiler = re.search(r"compiler|g\+\+|gcc|\bcc\b|cl\.exe|CalledProcessError", detail, re.I)
    return (f"torch.compile could not build the model ({type(error).__name__}: {detail}); "
            f"{compile_off}" + (", or install a C++ compiler" if no_compiler else ""))


def stop_uneven(batch_size, gradient_accumulation_steps, world_size):
    """Stop with one line where the micro-batches of a step cannot be shared out evenly."""
    # the same step of sequences in smaller micro-batches
    steps = math.lcm(gradient_accumulation_steps, world_size)
    sequences = batch_size * gradient_accumulation_steps
    same_step = ""
    if sequences % steps == 0:
        same_step = (f", e.g. --batch_size={sequences // steps} --gradient_accumulation_steps="
                     f"{steps} (the same {sequences} sequences per step)")
    fail(f"gradient_accumulation_steps={gradient_accumulation_steps} must be divisible by the "
         f"{world_size} processes; change one of them{same_step}")


def peer_gone(error):
    """The one line for a DDP process whose peer ended (killed, out of memory elsewhere): gloo or
    NCCL then fails every exchange with it; None for any other error, or without DDP."""
    names = [kind.__name__ for kind in type(error).__mro__]
    detail = (str(error).strip() or type(error).__name__).splitlines()[0]
    detail = re.sub(r"\[[^]]*\.cc:\d+\] ", "", detail).split(". ")[0][:160]  # gloo's source line
    lost = re.search(r"Connection (reset|closed) by peer|Broken pipe|peer.*(closed|gone)", detail,
                     re.I)
    if "RANK" not in os.environ or not (lost or "DistBackendError" in names
                                        or "DistNetworkError" in names):
        return None
    return f"another process of this run ended ({type(error).__name__}: {detail})"


def bad_argument(key, text):
    """The one line for --key without a value, or a boolean's --key given another word."""
    if text is None:
        fail(f"'--{key}' has no value; write --{key}=VALUE or --{key} VALUE (python train.py "
             f"--help lists them)")
    fail(f"--{key} {text}: {key} takes True or False (any case), not {text!r}; write "
         f"--{key} (True), --{key}=True or --{key}=False")


def bad_setting(key, value, types, defaults, source):
    """The one line for an unknown key, or a value of the wrong type, in a config file or argv."""
    if not key:  # '--=value'
        fail(unknown_argument("--", defaults))
    if key not in defaults:
        fail(f"unknown config key '{key}' in {source}; {suggestion(key, defaults)}")
    takes = "True or False" if types[key] is bool else "a " + types[key].__name__
    fail(f"{key}={value!r} in {source} has the wrong type: {key} takes {takes}, not a "
         f"{type(value).__name__}")


def config_error(path, e):
    """The one line for a config file that is not there or does not run: the file and line (the
    near names beside a file not found), and the fix."""
    import difflib
    import glob
    import traceback
    if path.startswith("-"):  # '--' alone, '-key=value'
        return unknown_argument(path, ())
    if isinstance(e, SystemExit):
        return (f"config file {path} called sys.exit({e.code!r}); a config file only assigns "
                f"settings: remove that call")
    if isinstance(e, OSError) and not os.path.isfile(path):
        names = {*glob.glob(os.path.join(os.path.dirname(path), "*.py")), *glob.glob("config/*.py")}
        near = difflib.get_close_matches(path, sorted(names), n=2, cutoff=0.6)
        return (f"config file '{path}' not found; "
                + (f"did you mean {' or '.join(near)}? " if near else "")
                + "give a path like config/cpu_baseline.py, or options as --key=value")
    if isinstance(e, UnicodeDecodeError):
        return (f"config file {path} is not text (byte {e.start} is not UTF-8); give a Python file "
                f"like config/cpu_baseline.py")
    if isinstance(e, SyntaxError):  # also in a config file it imports
        return f"config file {e.filename} line {e.lineno}: {e.msg}; fix the Python there"
    if isinstance(e, ValueError) and "null bytes" in str(e):
        return (f"config file {path} is not Python source ({e}); give a Python file like "
                f"config/cpu_baseline.py")
    outside = ("<", sys.prefix, sys.base_prefix)
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.abspath(f.filename) != CONFIGURATOR and not f.filename.startswith(outside)]
    where = f"{frames[-1].filename} line {frames[-1].lineno}" if frames else path
    return f"config file {where} raised {type(e).__name__}: {e}; fix the Python there"


def suggestion(key, known, command="python train.py"):
    """'did you mean ...?' for an unknown key: its name here if it is a nanoGPT or Hugging Face name
    or written with '-' for '_', else the closest known key."""
    import difflib
    aliases = {  # the name here: the same setting's names in nanoGPT and Hugging Face configs
        "context_size": "block_size n_ctx n_positions max_position_embeddings seq_len",
        "n_embed": "n_embd hidden_size d_model", "n_head": "n_heads num_heads num_attention_heads",
        "n_layer": "n_layers num_layers num_hidden_layers", "max_iters": "max_steps",
        "dropout": "attn_pdrop resid_pdrop embd_pdrop hidden_dropout_prob",
        "learning_rate": "lr", "min_lr": "min_learning_rate", "warmup_iters": "warmup_steps",
        "lr_decay_iters": "lr_decay_steps", "grad_clip": "max_grad_norm", "beta1": "adam_beta1",
        "beta2": "adam_beta2", "eval_interval": "eval_steps", "log_interval": "logging_steps",
        "out_dir": "output_dir", "batch_size": "per_device_train_batch_size micro_batch_size"}
    here = [name for name, names in aliases.items() if key in names.split()]
    if here and here[0] in known:
        return f"did you mean '{here[0]}'? ({key} is called {here[0]} here)"
    if key.replace("-", "_") in known:
        close = [key.replace("-", "_")]
    else:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"see {command} --help"


def unknown_argument(arg, known, command="python train.py"):
    """The one line for a command-line argument that is no known --key: the same in every script."""
    key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if not key:  # '--' alone, '-key', a stray word
        return f"'{arg}' is not a setting; write --key=value or --key value (see {command} --help)"
    return f"unknown config key '{key}' in the command line; {suggestion(key, known, command)}"


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


def refuse_task(dataset, path, data_dir, task, interface):
    """The one line for a task module that shares its name with a dataset folder, or lacks a name of
    the interface."""
    if os.path.isdir(data_dir):
        fail(f"--dataset={dataset} names both the task {path} and the dataset folder {data_dir}/; "
             f"rename one of them (prepare the text again with another --name)")
    missing = [name for name in interface if not hasattr(task, name)]
    fail(f"the task module {path} lacks {', '.join(missing)}; a task gives "
         f"{', '.join(interface)} (see tasks/reversal.py)")


def refuse_dataset(dataset, block, vocab_size):
    """The one line for a dataset data.check_dataset refuses: missing (the command that prepares it,
    the datasets data/ holds, the tasks, which need none), broken (what is wrong, and the command
    that prepares it again), or of more tokens than the run's vocab_size."""
    import glob
    import json

    import numpy as np
    data_dir = os.path.join("data", dataset)
    try:
        with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        meta["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):  # OSError: e.g. a folder named meta.json
        meta = {}
    tokenizer = "byte" if vocab_size is not None and vocab_size <= 256 else "gpt2"
    if not all(os.path.exists(os.path.join(data_dir, f))
               for f in ("train.bin", "val.bin", "meta.json")):
        online = prepare_hint(dataset, tokenizer)
        offline = prepare_hint(dataset, tokenizer, offline=True)
        where = f" (it downloads; offline, from your copy of the files: {offline})"
        held = sorted(os.path.basename(os.path.dirname(path))
                      for path in glob.glob(os.path.join("data", "*", "meta.json")))
        tasks = os.path.join(REPOSITORY, "tasks", "[a-z]*.py")
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


def task_misfit(dataset, task, context_size, vocab_size):
    """The one line for a context_size or a vocab_size too small for a task."""
    if context_size < task.BLOCK_SIZE:
        fail(f"context_size={context_size} is too short for {dataset} sequences of "
             f"{task.BLOCK_SIZE} tokens; leave context_size unset")
    fail(f"vocab_size={vocab_size} is smaller than the dataset's {task.VOCAB_SIZE} tokens; "
         f"leave vocab_size unset")


def refuse_overwrite(path):
    """The one line for a run from scratch in a folder whose ckpt.pt or log.jsonl (path) holds an
    earlier run's, without --overwrite=True."""
    if path.endswith("ckpt.pt"):
        fail(f"{path} already holds a trained model; continue it with --init_from=resume, train in "
             f"another --out_dir, or replace it with --overwrite=True")
    # a log without its checkpoint, such as a study's committed results
    fail(f"{path} holds the log of an earlier run; train in another --out_dir, or replace it with "
         f"--overwrite=True")


def introduce_run(model, batch_size, gradient_accumulation_steps, max_iters, eval_iters,
                  eval_interval, device):
    """Where the default dataset, the write-up's, is not prepared: before anything is downloaded or
    written, what the run is (its model, tokens, and time here, from a timed training step of the
    model on random tokens), the one command that prepares its data, and the config that trains
    the same model on a CPU in minutes; then end with exit status 1."""
    import time

    from machinery.hardware import duration, sync
    c = model.config
    rows = min(batch_size, 4)  # a few sequences, timed, then scaled to the micro-batch
    x = torch.randint(c.vocab_size, (rows, c.context_size), device=device)
    seconds = []
    for _ in range(2):  # the first warms up
        t0 = time.perf_counter()
        model.to(device)(x, x, return_logits=False)[1].backward()
        sync(device)
        seconds.append(time.perf_counter() - t0)
    step = min(seconds) * batch_size / rows * gradient_accumulation_steps
    # an evaluation batch: a forward pass, a third of a training micro-step
    evals = 2 * eval_iters * (max_iters // eval_interval + 1) * step / gradient_accumulation_steps
    tokens = max_iters * gradient_accumulation_steps * batch_size * c.context_size
    fail(f"data/wikitext103 is not prepared. This run trains the write-up's {c.variant} model "
         f"({model.num_params() / 1e6:.1f}M parameters)\n  on {tokens / 1e9:.2f}B tokens of "
         f"WikiText-103 ({max_iters:,} steps): about {duration(max_iters * step + evals / 3)} on "
         f"this machine ({device}, timed on one step).\n"
         f"  prepare its data (a download, then GPT-2 tokens):  python prepare_wikipedia.py\n"
         f"  or train the same model on a CPU in minutes:  "
         f"python train.py config/cpu_encdec_mse_pos_sub.py\n"
         f"    (its data:  python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte)")
