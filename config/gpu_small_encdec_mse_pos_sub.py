# Laptop GPU / T4 scale (config/gpu_small_base.py): the write-up's best encoder-decoder (MSE
# embedding loss, positional-embedding subtraction), 4 layers a side. 20.3M parameters;
# FLOPs per run: 2.15e+15 (about 3.6 minutes at 10 TFLOP/s)
from config.gpu_small_base import *
out_dir = "out/gpu_small_encdec_mse_pos_sub"
variant = "encdec"
n_embed = 256
n_head = 8
n_layer = 4
