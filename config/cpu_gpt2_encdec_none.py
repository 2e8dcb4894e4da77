# GPT-2 tokens, many passes: the bare encoder-decoder, no embedding loss and no pos sub (the
# write-up: 150 wide, 13 + 13 layers, 5 self-attention heads of 30, 10 cross-attention heads of 15)
from config.cpu_gpt2_base import *
out_dir = "out/cpu_gpt2_encdec_none"
variant = "encdec"
n_embed = 60
n_head = 2
n_layer = 4  # per side
cross_n_head = 4
embedding_loss = "none"
sub_pos_embed = "no"
