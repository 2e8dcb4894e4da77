# CPU scale: encoder-decoder with the positional-embedding subtraction
from config.cpu_encdec_none import *
out_dir = "out/cpu_encdec_pos_sub"
sub_pos_embed = "yes"
