# GPT-2 tokens, many passes: the write-up's best with LayerNorms without gains or biases inside the embedding loss,
# so that the loss cannot be brought to zero by shrinking their gains
from config.cpu_gpt2_encdec_mse_pos_sub import *
out_dir = "out/cpu_gpt2_encdec_mse_pos_sub_fixed_ln"
embedding_ln_affine = False
