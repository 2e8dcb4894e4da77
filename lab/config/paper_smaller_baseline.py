# The write-up's "smaller baseline": fewer parameters (15,441,192) than the best encoder-decoder
from config.paper_baseline import *
out_dir = "out/paper_smaller_baseline"
n_embed = 156
n_head = 12
