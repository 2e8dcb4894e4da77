# CPU scale: baseline with the positional-embedding subtraction
# (proposed in the write-up's conclusions, never run there)
from config.cpu_baseline import *
out_dir = "out/cpu_baseline_pos_sub"
sub_pos_embed = "yes"
