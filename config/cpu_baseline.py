# CPU scale: decoder-only baseline (the write-up's "baseline": 26 layers of n_embed 160)
from config.cpu_base import *
out_dir = "out/cpu_baseline"
variant = "baseline"
n_embed = 96
n_head = 4
n_layer = 8
