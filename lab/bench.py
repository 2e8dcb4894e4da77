"""
Benchmark of the three variants: training throughput, MFU, peak memory and sampling speed with and without
the KV cache. Variants run interleaved, repeat by repeat, so that machine noise hits them alike; figures are
medians over repeats, warm-up excluded.

    python -m lab.bench                  # paper configs and CPU-scale configs
    python -m lab.bench --quick          # fewer repeats, no 1000-token sampling
    python -m lab.bench --device=cuda --dtype=bfloat16 --compile
    python -m lab.bench --decode_only  # greedy decoding at batch 1 and 8 against Hugging Face's GPT-2 of the same shape
    python -m lab.bench --train_only --compile    # training against Hugging Face's GPT-2 of the baseline's shape,
                                                  # and the write-up's optimizer step of 800 x 200 tokens: its MFU

The Hugging Face row needs `pip install transformers` (used by this benchmark only; skipped without it).
"""

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # also as `python lab/bench.py`
from configurator import read_config  # noqa: E402
from configurator import add_flag, argument_parser  # noqa: E402
from machinery.files import write_atomic  # noqa: E402
from machinery.hardware import matmul_peak, pick_device, sync  # noqa: E402
from machinery.process import fail, machine_error, on_ctrl_c  # noqa: E402
from model import ModelConfig, build_model, logits_needed  # noqa: E402

CONFIGS = {  # name -> config files; the model flags are read from them, as train.py does
    "paper": ["config/paper_baseline.py", "config/paper_encdec_mse_pos_sub.py", "config/paper_parallel.py"],
    "cpu": ["config/cpu_baseline.py", "config/cpu_encdec_mse_pos_sub.py", "config/cpu_parallel.py"],
}


def model_config(path):
    settings = read_config(path if os.path.exists(path) else os.path.join(ROOT, path))  # from any working folder
    return ModelConfig(**{k: settings[k] for k in ModelConfig.flags() if k in settings})


class Trainer:
    """One model with its optimizer and a fixed batch; step() is one optimizer step: `accumulation` micro-batches of
    batch_size sequences, forward and backward each, then clipping and AdamW. hf: Hugging Face's GPT2LMHeadModel of
    config's shape instead of ours (config: a baseline's)."""

    def __init__(self, config, batch_size, device, dtype, compile, accumulation=1, hf=False):
        torch.manual_seed(0)
        device_type = device.split(":")[0]
        self.model = (hf_gpt2(build_model(config)) if hf else build_model(config)).to(device).train()
        if hf:  # ours' groups: weight decay on matmul weights and embeddings only
            params = list(self.model.parameters())
            self.optimizer = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                               lr=1e-4, betas=(0.9, 0.95), fused=device_type == "cuda")
        else:
            self.optimizer = self.model.configure_optimizer(0.1, 1e-4, (0.9, 0.95), device_type)
        self.forward = torch.compile(self.model) if compile else self.model
        self.x, self.y = (torch.randint(0, config.vocab_size, (batch_size, config.context_size), device=device)
                          for _ in range(2))
        autocast = dtype != torch.float32
        self.ctx = torch.autocast(device_type, dtype=dtype) if autocast else contextlib.nullcontext()
        self.scaler = torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)  # as train.py
        self.device, self.accumulation, self.hf = device, accumulation, hf
        self.return_logits = logits_needed(config, device_type, batch_size * config.context_size)  # as train.py

    def loss(self):
        if self.hf:  # it shifts the labels itself: inputs as labels, the same next-token task
            return self.forward(input_ids=self.x, labels=self.x).loss
        return self.forward(self.x, self.y, return_logits=self.return_logits)[1]

    def step(self, parts=None):
        """Seconds of one optimizer step. parts: a dict that gets the seconds of its forward, backward and optimizer
        parts added (the device is then synchronised between parts, which costs a little)."""
        def lap(part):
            nonlocal t
            if parts is not None:
                sync(self.device)
                parts[part] = parts.get(part, 0.0) + time.perf_counter() - t
                t = time.perf_counter()
        sync(self.device)
        start = t = time.perf_counter()
        for _ in range(self.accumulation):
            with self.ctx:
                loss = self.loss()
            lap("forward")
            self.scaler.scale(loss / self.accumulation).backward()
            lap("backward")
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        lap("optimizer")
        sync(self.device)
        return time.perf_counter() - start


def sampling_time(model, new_tokens, use_cache, device, batch_size=1):
    model.eval()
    prompt = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
    sync(device)
    t0 = time.perf_counter()
    out = model.generate(prompt, new_tokens, top_k=1, use_cache=use_cache)
    sync(device)
    model.train()
    return time.perf_counter() - t0, out


def peak_memory(path, batch_size, args):
    """Peak memory of one training step, in MiB: CUDA's allocator peak, or on CPU the peak resident size of
    a fresh process running the step, less that of the process before the model was built."""
    cmd = [sys.executable, __file__, "--memory_of", path, f"--batch_size={batch_size}", f"--device={args.device}",
           f"--dtype={args.dtype}"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode:  # its one line (out of memory, say), not a traceback of this process
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1].removeprefix("error: ")
        fail(f"the peak-memory step of {path} at batch {batch_size} failed: {last}")
    return float(result.stdout.split()[-1])


def resident_mib(field):
    """VmRSS (now) or VmHWM (peak) of this process. Not ru_maxrss: Linux carries the parent's peak into it."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def memory_of(args):
    device, dtype = args.device, getattr(torch, args.dtype)
    before = resident_mib("VmRSS") if device == "cpu" else 0
    trainer = Trainer(model_config(args.memory_of), args.batch_size, device, dtype, compile=False)
    trainer.step()
    if device == "cuda":
        print(torch.cuda.max_memory_allocated() / 2 ** 20)
    else:
        print(resident_mib("VmHWM") - before)


def hf_gpt2(model):
    """Hugging Face's GPT2LMHeadModel of the baseline's shape, holding its weights (zero biases where it has none)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    c = model.config
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=c.vocab_size, n_positions=c.context_size, n_embd=c.n_embed,
                                    n_layer=c.n_layer, n_head=c.n_head, activation_function="gelu",
                                    resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
                                    bos_token_id=None, eos_token_id=None))
    hf.config._attn_implementation = "sdpa"
    hf.generation_config.eos_token_id = None  # never stop early: the same number of tokens as ours
    ours = {"transformer.wte": model.wte, "transformer.wpe": model.wpe, "transformer.ln_f": model.ln_f}
    for i, b in enumerate(model.blocks):  # GPT-2's Conv1D stores (in, out): our Linear weights transposed
        ours.update({f"transformer.h.{i}.ln_1": b.ln_1, f"transformer.h.{i}.ln_2": b.ln_2,
                     f"transformer.h.{i}.attn.c_attn": b.attn.qkv_proj,
                     f"transformer.h.{i}.attn.c_proj": b.attn.out_proj,
                     f"transformer.h.{i}.mlp.c_fc": b.mlp.fc, f"transformer.h.{i}.mlp.c_proj": b.mlp.out_proj})
    with torch.no_grad():
        for name, module in hf.named_modules():
            if name in ours:
                w, b = ours[name].weight, getattr(ours[name], "bias", None)
                module.weight.copy_(w.T if "attn.c" in name or "mlp.c" in name else w)
                if getattr(module, "bias", None) is not None:
                    module.bias.copy_(b) if b is not None else module.bias.zero_()
    return hf.eval()


def memory_bandwidth(n_bytes, device="cpu", repeats=10):
    """Bytes/s of summing a float32 tensor of n_bytes, best of repeats: how fast the weights can be read once."""
    x = torch.ones(n_bytes // 4, device=device)
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        x.sum()
        sync(device)
        times.append(time.perf_counter() - t0)
    return n_bytes / min(times)


# dense bf16 / fp16 matmul FLOP/s of the data sheets: MFU against what the GPU is sold as (first match of its name)
DATASHEET_PEAKS = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12}


def datasheet_peak(device, dtype):
    """The data sheet's peak FLOP/s of this CUDA GPU in dtype, or None (another GPU, float32, not CUDA)."""
    if not device.startswith("cuda") or dtype == "float32":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for gpu, peak in DATASHEET_PEAKS.items() if gpu in name), None)


def device_name(device):
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else device


def out_of_memory(error):
    return (machine_error(error, "") or "").startswith("out of memory")


def compile_failed(error):
    return (machine_error(error, "") or "").startswith("torch.compile")


def largest_fitting(config, sequences, device, dtype, compile):
    """(Trainer, micro-batch, warm-up seconds) of one optimizer step of `sequences` sequences at the largest
    micro-batch, a divisor of it, whose step fits in memory; the accumulation makes up the rest of the step."""
    for micro in [d for d in range(sequences, 0, -1) if sequences % d == 0]:
        try:
            trainer = Trainer(config, micro, device, dtype, compile, accumulation=sequences // micro)
            t0 = time.perf_counter()
            trainer.step(), trainer.step()  # warm-up (and compilation), excluded from timing
            return trainer, micro, time.perf_counter() - t0
        except Exception as e:
            if not out_of_memory(e):
                raise
        trainer = None
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    raise MemoryError(f"out of memory even at a micro-batch of 1 sequence of {config.context_size} tokens")


def parts_line(parts, seconds):
    """e.g. "forward 31% backward 60% optimizer 9% of a 212 ms step timed part by part (205 ms timed whole)"."""
    total = sum(parts.values())
    return (" ".join(f"{k} {v / total:.0%}" for k, v in parts.items())
            + f" of a {total * 1e3:.0f} ms step timed part by part ({seconds * 1e3:.0f} ms timed whole)")


def train_race(args):
    """Training steps of our three variants and of Hugging Face's GPT2LMHeadModel of the baseline's shape, at the
    write-up's micro-batch, interleaved step by step in one process; then the write-up's optimizer step of
    --step_sequences sequences at the largest micro-batch that fits, and its MFU. A figure short of its target
    comes with what bounds it: the share of the step's forward, backward and optimizer parts."""
    device, dtype = args.device, getattr(torch, args.dtype)
    configs = {c.variant: c for c in map(model_config, CONFIGS[args.configs.split(",")[0]])}
    T, micro = configs["baseline"].context_size, args.batch_size or 50
    repeats = args.repeats or (3 if args.quick else 10)
    measured = max(matmul_peak(device, dtype, n, 10, 2, statistics.median) for n in (1024, 2048))
    sheet = datasheet_peak(device, args.dtype)
    peak = sheet or measured
    print(f"train race: {device_name(device)}, {args.dtype}, compile {args.compile}, torch {torch.__version__}; "
          f"micro-batch {micro} x {T} tokens, median of {repeats} interleaved steps; MFU against "
          f"{'the data sheet' if sheet else 'the measured matmul peak'}: {peak / 1e9:,.0f} GFLOP/s "
          f"(measured {args.dtype} matmul: {measured / 1e9:,.0f})", flush=True)
    trainers = {f"ours {v}": Trainer(c, micro, device, dtype, args.compile) for v, c in configs.items()}
    try:
        trainers["HF GPT2LMHeadModel"] = Trainer(configs["baseline"], micro, device, dtype, args.compile, hf=True)
    except ImportError:
        print("train race: Hugging Face row skipped: transformers is not installed (pip install transformers)")
    warmup, eager = {}, set()  # eager: the models whose compile failed, raced uncompiled
    for k, t in trainers.items():
        t0 = time.perf_counter()
        try:
            t.step(), t.step()
        except Exception as e:
            if not compile_failed(e):
                raise
            print(f"train race: {k}: {machine_error(e, '')}; raced eager instead", flush=True)
            eager.add(k)
            t.forward = t.model
            t.optimizer.zero_grad(set_to_none=True)
            t.step(), t.step()
        warmup[k] = time.perf_counter() - t0
    times = {k: [] for k in trainers}
    for _ in range(repeats):
        for k, t in trainers.items():
            times[k].append(t.step())
    rows, speed = [], {k: micro * T / statistics.median(ts) for k, ts in times.items()}
    print(f"{'model':20} {'tok/s':>10} {'vs HF':>6} {'vs ours baseline':>16} {'MFU':>6} {'warm-up s':>9}  step parts")
    for k, t in trainers.items():
        parts = {}
        t.step(parts)
        per_token = (t.model if not t.hf else trainers["ours baseline"].model).flops_per_token(T)
        hf = speed.get("HF GPT2LMHeadModel")
        row = dict(model=k, compiled=args.compile and k not in eager, micro_batch=micro, tokens_per_s=speed[k],
                   vs_hf=speed[k] / hf if hf else None,
                   vs_baseline=speed[k] / speed["ours baseline"], mfu=per_token * speed[k] / peak,
                   warmup_s=warmup[k], parts=parts)
        rows.append(row)
        vs_hf = f"{row['vs_hf']:.2f}x" if hf else "-"
        print(f"{k:20} {speed[k]:>10,.0f} {vs_hf:>6} {row['vs_baseline']:>15.2f}x {row['mfu']:>6.1%} "
              f"{warmup[k]:>9.1f}  {parts_line(parts, statistics.median(times[k]))}", flush=True)
    by_model = {r["model"]: r for r in rows}
    targets = [("ours baseline", "vs_hf", 1.2, "x Hugging Face's tokens/s")] * ("HF GPT2LMHeadModel" in by_model) + [
        ("ours encdec", "vs_baseline", 0.9, " of our baseline's tokens/s")]
    del trainers
    gc.collect()

    sequences, step_rows = args.step_sequences, []
    print(f"optimizer step: {sequences} x {T} tokens, at the largest micro-batch that fits (a divisor of "
          f"{sequences}), median of {max(2, repeats // 2)} interleaved steps", flush=True)
    fitted = {f"ours {v}": largest_fitting(c, sequences, device, dtype, args.compile and f"ours {v}" not in eager)
              for v, c in configs.items()}
    step_times = {k: [] for k in fitted}
    for _ in range(max(2, repeats // 2)):
        for k, (t, _, _) in fitted.items():
            step_times[k].append(t.step())
    for k, (t, m, warm) in fitted.items():
        parts = {}
        t.step(parts)
        seconds = statistics.median(step_times[k])
        tokens_per_s = sequences * T / seconds
        row = dict(model=k, micro_batch=m, accumulation=sequences // m, tokens_per_s=tokens_per_s,
                   mfu=t.model.flops_per_token(T) * tokens_per_s / peak, step_s=seconds, warmup_s=warm, parts=parts)
        step_rows.append(row)
        targets.append((k, "mfu", 0.25, " MFU at the optimizer step"))
        by_model[k + " step"] = row
        print(f"{k:20} micro-batch {m} x {sequences // m}: {tokens_per_s:,.0f} tok/s, {seconds:.3f} s a step, "
              f"MFU {row['mfu']:.1%}; {parts_line(parts, seconds)}", flush=True)
    verdicts = []
    for model, key, target, what in targets:
        row = by_model[model + " step" * (key == "mfu")]
        met = row[key] >= target
        verdicts.append(dict(model=model, figure=key, value=row[key], target=target, met=met))
        value = f"{row[key]:.1%}" if key == "mfu" else f"{row[key]:.2f}"
        bound = max(row["parts"], key=row["parts"].get)
        print(f"target: {model} >= {target:.0%}{what}" if key == "mfu" else f"target: {model} >= {target}{what}",
              f"-> {value}: " + ("met" if met else f"SHORT; its step is bound by its {bound} "
                                              f"({row['parts'][bound] / sum(row['parts'].values()):.0%})"))
    return dict(peak_flops=peak, datasheet=bool(sheet), measured_peak=measured, rows=rows, step_rows=step_rows,
                targets=verdicts)


def decode_race(args):
    """Greedy decoding on --device in --dtype (the weights cast to it), ours against Hugging Face's GPT-2 of the
    baseline's shape, interleaved run by run."""
    device, dtype = getattr(args, "device", "cpu"), getattr(torch, getattr(args, "dtype", "float32"))
    models, paths = {}, CONFIGS[args.configs.split(",")[0]]
    context = model_config(paths[0]).context_size
    if args.decode_prompt >= context:
        sys.exit(f"error: --decode_prompt={args.decode_prompt} leaves no room in the context of {context}; "
                 f"use a shorter prompt")
    new_tokens = min(args.decode_tokens, context - args.decode_prompt)  # Hugging Face's GPT-2 stops at its context
    for path in paths:
        torch.manual_seed(0)
        model = build_model(model_config(path)).eval()
        model.to(device, dtype)
        models[f"ours {model.config.variant}"] = (model, lambda p, m=model: m.generate(p, new_tokens, top_k=1))
    base = models["ours baseline"][0]
    try:
        hf = hf_gpt2(base).to(device, dtype)  # copy_ takes the weights across devices and precisions
        models["HF GPT2LMHeadModel"] = (hf, lambda p: hf.generate(p, attention_mask=torch.ones_like(p), do_sample=False,
                                                                   max_new_tokens=new_tokens, pad_token_id=0))
    except ImportError:
        print("decode: Hugging Face row skipped: transformers is not installed (pip install transformers)")
    weight_bytes = {k: sum(p.numel() * p.element_size() for p in m.parameters()) for k, (m, _) in models.items()}
    bandwidth = memory_bandwidth(max(weight_bytes.values()), device)
    print(f"decode: greedy, {device_name(device)}, {str(dtype).removeprefix('torch.')}, "
          f"threads {torch.get_num_threads()}, prompt {args.decode_prompt} tokens, "
          f"{new_tokens} new, median of {args.decode_repeats} interleaved runs; "
          f"memory bandwidth {bandwidth / 1e9:.1f} GB/s "
          f"(best sum of a weights-sized tensor); bound = bandwidth / weight bytes per decoding step")
    print(f"{'model':24} {'batch':>5} {'MB':>6} {'tok/s':>8} {'vs HF':>6} {'of bound':>8}  tokens")
    rows = []
    for batch in (1, 8):
        prompt = torch.randint(0, base.config.vocab_size, (batch, args.decode_prompt),
                               generator=torch.Generator().manual_seed(batch)).to(device)
        times, outs = {k: [] for k in models}, {}
        with torch.inference_mode():
            for _, run in models.values():  # warm-up
                run(prompt[:, :4])
                sync(device)
            for _ in range(args.decode_repeats):
                for k, (_, run) in models.items():
                    sync(device)
                    t0 = time.perf_counter()
                    outs[k] = run(prompt)
                    sync(device)
                    times[k].append(time.perf_counter() - t0)
        hf_times = times.get("HF GPT2LMHeadModel")
        hf_speed = batch * new_tokens / statistics.median(hf_times) if hf_times else None
        for k in models:
            speed = batch * new_tokens / statistics.median(times[k])
            agree, note = None, ""
            if hf_speed and k in ("ours baseline", "HF GPT2LMHeadModel"):
                agree = torch.equal(outs["ours baseline"], outs["HF GPT2LMHeadModel"])
                note = "same as HF" if agree else "DIFFER from HF"
            row = dict(model=k, batch=batch, weight_bytes=weight_bytes[k], tokens_per_s=speed,
                       vs_hf=speed / hf_speed if hf_speed else None,
                       of_bound=weight_bytes[k] * speed / batch / bandwidth,
                       tokens_agree_with_hf=agree)
            rows.append(row)
            vs_hf = f"{row['vs_hf']:.2f}x" if hf_speed else "-"
            print(f"{k:24} {batch:>5} {row['weight_bytes'] / 1e6:>6.1f} {speed:>8.1f} {vs_hf:>6} "
                  f"{row['of_bound']:>8.1%}  {note}", flush=True)
    return dict(device=device_name(device), dtype=str(dtype).removeprefix("torch."), memory_bandwidth=bandwidth,
                rows=rows)


def write_json(args, **figures):
    if args.json:  # whole or not at all: a write cut short leaves no half file
        write_atomic(args.json, json.dumps(dict(figures, args=vars(args)), indent=1).encode())


def json_problem(path):
    """Why --json=path cannot be written at the end of the benchmark, or None: checked before its minutes of work."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a folder; give a file name, e.g. --json=bench.json"
    if not os.path.isdir(folder):
        return f"its folder {folder} does not exist; create it, or give a file in a folder that exists"
    if not os.access(folder, os.W_OK):  # also a read-only file system, for root too
        return f"its folder {folder} is not writable; make it writable, or give a file in a folder you can write to"
    return None


def check_flags(args):
    """Every flag's value, before the first measurement (as train.py checks its settings): one line naming the flag
    and what to use instead."""
    names = args.configs.split(",")
    context = model_config(CONFIGS[names[0]][0]).context_size if names[0] in CONFIGS else None

    def at_least_one(name, what):
        return getattr(args, name) is None or getattr(args, name) >= 1, f"use 1 or more {what}"
    checks = {  # flag: (is the value allowed?, what to use instead)
        "configs": (all(name in CONFIGS for name in names) and len(set(names)) == len(names),
                    f"use {', '.join(CONFIGS)} or both, comma-separated, e.g. --configs=cpu"),
        "repeats": at_least_one("repeats", "timed steps, or leave it out for the default"),
        "batch_size": at_least_one("batch_size", "sequences"),
        "step_sequences": at_least_one("step_sequences", "sequences"),
        "sample_batch_size": at_least_one("sample_batch_size", "sequences"),
        "decode_prompt": (1 <= args.decode_prompt < (context or math.inf),
                          (f"use 1 to {(context or 2) - 1} tokens: the prompt must leave room for new tokens in "
                           f"the context of {context}")),
        "decode_tokens": at_least_one("decode_tokens", "new tokens"),
        "decode_repeats": at_least_one("decode_repeats", "runs"),
        "threads": at_least_one("threads", "threads, or leave it out for PyTorch's"),
        "json": (args.json is None or json_problem(args.json) is None, args.json and json_problem(args.json)),
    }
    for name, (allowed, fix) in checks.items():
        if not allowed:
            fail(f"--{name}={getattr(args, name)} is not allowed; {fix}")
    if args.train_only and args.decode_only:
        fail("--train_only and --decode_only: give one of them (or neither, for the whole benchmark)")


def table_line(r, sample_lengths):
    line = (f"{r['configs']:7} {r['variant']:9} {r['params']:>11,} {r['train_tokens_per_s']:>11,.0f} "
            f"{r['mfu']:>6.1%} {r['peak_mem_mib']:>9,.0f}")
    for n in sample_lengths:
        cache, nocache = r[f"sample{n}_cache"], r[f"sample{n}_nocache"]
        same = "yes" if r[f"sample{n}_identical"] else "NO"
        line += f" {cache:>15,.1f} {nocache:>9,.1f} {cache / nocache:>7.1f}x {same:>5}"
    return line


def main():
    parser = argument_parser(__doc__, "python -m lab.bench")
    parser.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto", help="auto (as train.py), float32, bfloat16 or float16")
    add_flag(parser, "--compile", "torch.compile the training step")
    add_flag(parser, "--quick", "fewer repeats, no 1000-token sampling")
    parser.add_argument("--configs", default="paper,cpu", help="comma-separated: paper, cpu")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed training steps per variant (default 15; quick 5)")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="training micro-batch (default 8; the training race: 50, the write-up's)")
    parser.add_argument("--step_sequences", type=int, default=800,
                        help="sequences of the training race's optimizer step (the write-up's 800)")
    parser.add_argument("--sample_batch_size", type=int, default=1, help="sequences generated at once")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    add_flag(parser, "--decode_only", "only the greedy decoding race against Hugging Face")
    add_flag(parser, "--train_only", "only the training race against Hugging Face")
    parser.add_argument("--decode_prompt", type=int, default=40, help="prompt tokens in the decoding race")
    parser.add_argument("--decode_tokens", type=int, default=150, help="new tokens in the decoding race")
    parser.add_argument("--decode_repeats", type=int, default=3, help="interleaved runs in the decoding race")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's)")
    parser.add_argument("--memory_of", default=None, help=argparse.SUPPRESS)  # internal: one step in a fresh process
    args = parser.parse_args()
    args.device, args.dtype = pick_device(args.device, args.dtype)
    if args.memory_of:
        return memory_of(args)
    check_flags(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.decode_only:
        return write_json(args, decode=decode_race(args))
    if args.train_only:
        return write_json(args, train=train_race(args))
    args.batch_size = args.batch_size or 8
    device, dtype = args.device, getattr(torch, args.dtype)
    repeats = args.repeats or (5 if args.quick else 15)
    sample_lengths = (200,) if args.quick else (200, 1000)

    peak = max(matmul_peak(device, dtype, n, 10, 2, statistics.median) for n in (1024, 2048))
    print(f"device {device}, dtype {args.dtype}, threads {torch.get_num_threads()}, compile {args.compile}, "
          f"torch {torch.__version__}; measured {args.dtype} matmul peak: {peak / 1e9:.1f} GFLOP/s; "
          f"training batch {args.batch_size}, sampling batch {args.sample_batch_size} (sampling in tokens/s)")
    head = f"{'configs':7} {'variant':9} {'params':>11} {'train tok/s':>11} {'MFU':>6} {'peak MiB':>9}"
    for n in sample_lengths:
        head += f" {f'sample{n} cache':>15} {'no cache':>9} {'speedup':>8} {'same':>5}"
    print(head, flush=True)
    rows = []
    for name in args.configs.split(","):
        paths = CONFIGS[name]
        trainers = [Trainer(model_config(p), args.batch_size, device, dtype, args.compile) for p in paths]
        warmup = []
        for t in trainers:  # warm-up (and compilation) excluded from timing
            t0 = time.perf_counter()
            t.step(), t.step()
            warmup.append(time.perf_counter() - t0)
        print(f"{name}: warm-up (2 steps{', compilation included' if args.compile else ''}) " +
              ", ".join(f"{t.model.config.variant} {w:.1f}s" for t, w in zip(trainers, warmup)), flush=True)
        times = [[] for _ in trainers]
        for _ in range(repeats):  # interleaved: each repeat times every variant once
            for t, ts in zip(trainers, times):
                ts.append(t.step())
        print(f"{name}: median training step " + ", ".join(
            f"{t.model.config.variant} {statistics.median(ts):.3f}s" for t, ts in zip(trainers, times)), flush=True)
        for path, t, ts in zip(paths, trainers, times):
            c = t.model.config
            tokens_per_s = args.batch_size * c.context_size / statistics.median(ts)
            row = dict(configs=name, variant=c.variant, file=path, params=t.model.num_params(),
                       train_tokens_per_s=tokens_per_s,
                       mfu=t.model.flops_per_token(c.context_size) * tokens_per_s / peak,
                       peak_mem_mib=peak_memory(path, args.batch_size, args))
            for n in sample_lengths:
                for use_cache in (True, False):
                    repeats_n = 1 if args.quick or n > 200 else 3  # 1000 tokens without a cache take minutes
                    runs = [sampling_time(t.model, n, use_cache, device, args.sample_batch_size)
                            for _ in range(repeats_n)]
                    seconds = statistics.median(r[0] for r in runs)
                    row[f"sample{n}_{'cache' if use_cache else 'nocache'}"] = args.sample_batch_size * n / seconds
                    row[f"sample{n}_out_{use_cache}"] = runs[0][1]
                row[f"sample{n}_identical"] = torch.equal(row.pop(f"sample{n}_out_True"),
                                                          row.pop(f"sample{n}_out_False"))
            rows.append(row)
            print(table_line(row, sample_lengths), flush=True)
        del trainers

    for name in args.configs.split(","):
        by_variant = {r["variant"]: r for r in rows if r["configs"] == name}
        base = by_variant["baseline"]["train_tokens_per_s"]
        print(f"{name}: training tokens/s relative to the baseline: " +
              ", ".join(f"{v} {r['train_tokens_per_s'] / base:.3f}" for v, r in by_variant.items() if v != "baseline"))
    write_json(args, peak_flops=peak, rows=rows, decode=decode_race(args))


if __name__ == "__main__":  # Ctrl-C, SIGTERM, SIGHUP: one line; so is running out of memory
    on_ctrl_c("the benchmark was stopped; its figures so far are printed above, and no --json file was written",
              "--batch_size, --sample_batch_size or --step_sequences")
    main()
