# GPT-2 tokens, many passes: the baseline with dropout 0.2. Evaluated without dropout; the original code kept
# attention dropout on in its evaluations, so the write-up's val loss for this run was measured with it
from config.cpu_gpt2_baseline import *
out_dir = "out/cpu_gpt2_dropout_baseline"
dropout = 0.2
