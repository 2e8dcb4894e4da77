# GPT-2 tokens, many passes: pos sub only, no embedding loss
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_pos_sub"
sub_pos_embed = "yes"
