# CPU scale: the parallel encoder-decoder of the draft "Parallel Encoder-Decoder Transformer"
# (MSE loss, next-position embedding added to the decoder input)
from config.cpu_base import *
out_dir = "out/cpu_parallel"
variant = "parallel"
n_embed = 88
n_head = 4
n_layer = 4
embedding_loss = "mse"
sub_pos_embed = "no"
add_pos_embed_to_decoder = True
