# GPT-2 tokens, many passes: MSE embedding loss (coefficient 8), no pos sub
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_mse"
embedding_loss = "mse"
embedding_loss_coeff = 8.0
