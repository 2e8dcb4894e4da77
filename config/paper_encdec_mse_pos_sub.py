# The write-up's run "with MSE embedding loss and pos sub", the best run: 15,763,500 parameters
from config.paper_encdec_none import *
out_dir = "out/paper_encdec_mse_pos_sub"
embedding_loss = "mse"
embedding_loss_coeff = 8.0
embedding_ln = "init"
encoder_out_ln = True
detach = "encoder_out"
sub_pos_embed = "yes"
