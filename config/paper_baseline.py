# The write-up's "baseline": decoder-only GPT, 16,036,800 parameters with the GPT-2 vocabulary
from config.paper_base import *
out_dir = "out/paper_baseline"
variant = "baseline"
n_embed = 160
n_head = 10
n_layer = 26
