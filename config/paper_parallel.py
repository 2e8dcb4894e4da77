# The parallel encoder-decoder of the draft "Parallel Encoder-Decoder Transformer" with the MSE
# encoder loss and add_pos_embed_to_decoder=True: 15,698,400 parameters. The draft gives n_embed and
# n_layer, not the head counts: n_head = 5 is a guess (cross_n_head defaults to 10). The
# embedding-loss settings are the model defaults (LayerNorms, detached encoder output; the
# coefficient is not given).
from config.paper_base import *
out_dir = "out/paper_parallel"
variant = "parallel"
n_embed = 200
n_head = 5
n_layer = 5
embedding_loss = "mse"
sub_pos_embed = "no"
add_pos_embed_to_decoder = True
