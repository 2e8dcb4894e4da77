# CPU scale: encoder-decoder with the MSE embedding loss and pos sub (the write-up's best)
from config.cpu_encdec_none import *
out_dir = "out/cpu_encdec_mse_pos_sub"
embedding_loss = "mse"
embedding_loss_coeff = 8.0
sub_pos_embed = "yes"
