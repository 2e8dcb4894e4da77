# Laptop GPU / T4 scale (config/gpu_small_base.py): the parallel variant of the write-up's earlier
# draft, 4 layers. 20.3M parameters; FLOPs per run: 2.15e+15 (about 3.6 minutes at 10 TFLOP/s)
from config.gpu_small_base import *
out_dir = "out/gpu_small_parallel"
variant = "parallel"
n_embed = 256
n_head = 8
n_layer = 4
