# GPT-2 tokens, many passes: the rotary bare encoder-decoder with pos sub, from a learned table of the next positions'
# embeddings that is used only there (rotary positions add nothing to E)
from lab.config.cpu_gpt2_encdec_none_rotary import *
out_dir = "out/cpu_gpt2_encdec_rotary_pos_sub"
sub_pos_embed = "yes"
