# GPT-2 tokens, many passes: cosine embedding loss (coefficient 8), no pos sub
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_cosine"
embedding_loss = "cosine"
embedding_loss_coeff = 8.0
