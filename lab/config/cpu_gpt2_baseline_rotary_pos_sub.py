# GPT-2 tokens, many passes: the rotary baseline with pos sub, from a learned table of the next positions' embeddings
# that is used only there (rotary positions add nothing to E)
from lab.config.cpu_gpt2_baseline_rotary import *
out_dir = "out/cpu_gpt2_baseline_rotary_pos_sub"
sub_pos_embed = "yes"
