# The GPT-2-token study at a size a laptop GPU or a T4 (Colab's free GPU) makes sense for: minutes
# per run, not hours. The write-up's data (WikiText-103, GPT-2 tokens), each run under one pass over
# it, as the write-up trains. Prepare the data once (a 314 MB download):
#   python prepare_wikipedia.py
# (offline, from a folder of your copies of its two Parquet files: add --wikitext103 --input=PATH/).
# Each model's file states its FLOPs per run (model.flops_per_token x tokens, checked by the tests):
# the time on any device is that over its sustained FLOP/s; e.g. 1e15 FLOPs at 10 TFLOP/s (a T4 in
# float16 at ~15% of its peak) is 100 s, at the ~50 GFLOP/s of a 2-core x86 CPU about 5.5 hours. On
# CUDA, add --compile=True.
from config.paper_base import *
device = "auto"  # cuda, then mps, then cpu
# bfloat16 where the GPU has it, float16 with a gradient scaler on a T4, float32 on mps
dtype = "auto"
context_size = 256
batch_size = 32
gradient_accumulation_steps = 1
max_iters = 2000  # 2000 x 32 x 256 = 16.4M tokens: under one pass over WikiText-103's 38.3M
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 100
lr_decay_iters = 2000
eval_interval = 250
eval_iters = 20
log_interval = 50
