# CPU scale: encoder-decoder with the cosine-dissimilarity embedding loss
from config.cpu_base import *
out_dir = "out/cpu_encdec_cosine"
variant = "encdec"
n_embed = 88
n_head = 4
n_layer = 4  # per side
cross_n_head = 8
embedding_loss = "cosine"
embedding_loss_coeff = 1.0
sub_pos_embed = "no"
