# GPT-2 tokens, many passes: a baseline with fewer parameters than every encoder-decoder (the write-up: 156 wide)
from config.cpu_gpt2_baseline import *
out_dir = "out/cpu_gpt2_smaller_baseline"
n_embed = 62
n_head = 2
