# GPT-2 tokens, many passes: the write-up's best, MSE embedding loss (coefficient 8, as in its
# config) and pos sub
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_mse_pos_sub"
embedding_loss = "mse"
embedding_loss_coeff = 8.0
sub_pos_embed = "yes"
