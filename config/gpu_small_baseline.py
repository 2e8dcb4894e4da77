# Laptop GPU / T4 scale (config/gpu_small_base.py): the decoder-only baseline.
# 20.7M parameters; FLOPs per run: 2.17e+15 (about 3.6 minutes at 10 TFLOP/s)
from config.gpu_small_base import *
out_dir = "out/gpu_small_baseline"
variant = "baseline"
n_embed = 256
n_head = 8
n_layer = 10
