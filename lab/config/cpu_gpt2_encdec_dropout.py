# GPT-2 tokens, many passes: the write-up's best with dropout 0.2 (a next step the write-up proposes)
from config.cpu_gpt2_encdec_mse_pos_sub import *
out_dir = "out/cpu_gpt2_encdec_dropout"
dropout = 0.2
