# CPU scale: baseline with fewer parameters than the encoder-decoders (the write-up's "smaller baseline")
from config.cpu_baseline import *
out_dir = "out/cpu_smaller_baseline"
n_embed = 92
