# GPT-2 tokens, many passes: the decoder-only baseline (the write-up: 160 wide, 26 layers, 10 heads
# of 16)
from config.cpu_gpt2_base import *
out_dir = "out/cpu_gpt2_baseline"
variant = "baseline"
n_embed = 64
n_head = 4
n_layer = 8
