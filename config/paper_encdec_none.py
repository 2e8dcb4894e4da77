# The write-up's run "no embedding loss and no pos sub"
from config.paper_base import *
out_dir = "out/paper_encdec_none"
variant = "encdec"
n_embed = 150
n_head = 5
n_layer = 13  # per side: 13 encoder and 13 decoder layers
cross_n_head = 10
embedding_loss = "none"
sub_pos_embed = "no"
