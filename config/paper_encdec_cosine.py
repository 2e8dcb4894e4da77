# The write-up's run "with cosine-dissimilarity embedding loss"
from config.paper_base import *
out_dir = "out/paper_encdec_cosine"
variant = "encdec"
n_embed = 150
n_head = 5
n_layer = 13  # per side: 13 encoder and 13 decoder layers
cross_n_head = 10
embedding_loss = "cosine"
embedding_loss_coeff = 1.0
embedding_ln = "init"
encoder_out_ln = True
detach = "encoder_out"
sub_pos_embed = "no"
