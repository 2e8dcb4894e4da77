# GPT-2 tokens, many passes: the baseline at a lower learning rate, so that its train loss tracks the bare
# encoder-decoder's (the control for "the encoder-decoder fits more slowly" in the gpt2_heldout suite).
# Picked on seed 0 with `python -m lab.study --pick_lr=0.001,0.0014,0.00155,0.0017`: of these rates (min_lr a tenth),
# the one whose 1,200-step train-loss curve is nearest cpu_gpt2_encdec_none's (root mean square over evaluations).
from config.cpu_gpt2_baseline import *
out_dir = "out/cpu_gpt2_baseline_slow"
learning_rate = 1.55e-3
min_lr = 1.55e-4
