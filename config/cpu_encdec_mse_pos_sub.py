# CPU scale: encoder-decoder with the MSE embedding loss and pos sub (the write-up's best)
from config.cpu_base import *
out_dir = "out/cpu_encdec_mse_pos_sub"
variant = "encdec"
n_embed = 88
n_head = 4
n_layer = 4  # per side
cross_n_head = 8
embedding_loss = "mse"
embedding_loss_coeff = 8.0
sub_pos_embed = "yes"
