# The write-up's "0.2 dropout baseline"
from config.paper_base import *
out_dir = "out/paper_dropout_baseline"
variant = "baseline"
n_embed = 160
n_head = 10
n_layer = 26
dropout = 0.2
