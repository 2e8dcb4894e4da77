# The write-up's run "with pos embed sub"
from config.paper_encdec_none import *
out_dir = "out/paper_encdec_pos_sub"
sub_pos_embed = "yes"
