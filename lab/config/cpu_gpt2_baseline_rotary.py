# GPT-2 tokens, many passes: the baseline with rotary positions in its attention instead of a learned table
from config.cpu_gpt2_baseline import *
out_dir = "out/cpu_gpt2_baseline_rotary"
rotary = True
