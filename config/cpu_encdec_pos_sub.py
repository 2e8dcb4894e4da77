# CPU scale: encoder-decoder with the positional-embedding subtraction
from config.cpu_base import *
out_dir = "out/cpu_encdec_pos_sub"
variant = "encdec"
n_embed = 88
n_head = 4
n_layer = 4  # per side
cross_n_head = 8
embedding_loss = "none"
sub_pos_embed = "yes"
