# GPT-2 tokens, many passes: the draft's parallel encoder-decoder, same shape as the serial one; MSE
# embedding loss with the original code's coefficient for it, 0.25, and the next-position embedding
# added to the decoder input
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_parallel"
variant = "parallel"
embedding_loss = "mse"
embedding_loss_coeff = 0.25
add_pos_embed_to_decoder = True
