# GPT-2 tokens, many passes: MSE embedding loss with coefficient 1, and pos sub
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_mse_pos_sub_coeff1"
embedding_loss = "mse"
embedding_loss_coeff = 1.0
sub_pos_embed = "yes"
