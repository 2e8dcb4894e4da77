# CPU scale: baseline with 0.2 dropout (the write-up's "0.2 dropout baseline")
from config.cpu_base import *
out_dir = "out/cpu_dropout_baseline"
variant = "baseline"
n_embed = 96
n_head = 4
n_layer = 8
dropout = 0.2
