# CPU scale: baseline with fewer parameters than the encoder-decoders (the write-up's "smaller baseline")
from config.cpu_base import *
out_dir = "out/cpu_smaller_baseline"
variant = "baseline"
n_embed = 92
n_head = 4
n_layer = 8
