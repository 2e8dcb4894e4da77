# The baseline of the draft "Parallel Encoder-Decoder Transformer": 15,850,380 parameters;
# the draft does not give the head count, n_head = 5 is a guess
from config.paper_base import *
out_dir = "out/paper_parallel_baseline"
variant = "baseline"
n_embed = 210
n_head = 5
n_layer = 10
