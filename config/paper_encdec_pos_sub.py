# The write-up's run "with pos embed sub"
from config.paper_base import *
out_dir = "out/paper_encdec_pos_sub"
variant = "encdec"
n_embed = 150
n_head = 5
n_layer = 13  # per side: 13 encoder and 13 decoder layers
cross_n_head = 10
embedding_loss = "none"
sub_pos_embed = "yes"
