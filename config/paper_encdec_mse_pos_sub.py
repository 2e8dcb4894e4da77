# The write-up's run "with MSE embedding loss and pos sub", the best run: 15,763,500 parameters
from config.paper_base import *
out_dir = "out/paper_encdec_mse_pos_sub"
variant = "encdec"
n_embed = 150
n_head = 5
n_layer = 13  # per side: 13 encoder and 13 decoder layers
cross_n_head = 10
embedding_loss = "mse"
embedding_loss_coeff = 8.0
embedding_ln = "init"
encoder_out_ln = True
detach = "encoder_out"
sub_pos_embed = "yes"
