# GPT-2 tokens, many passes: the baseline with positional-embedding subtraction (proposed in the write-up, not run)
from config.cpu_gpt2_baseline import *
out_dir = "out/cpu_gpt2_baseline_pos_sub"
sub_pos_embed = "yes"
