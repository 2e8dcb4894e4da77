# GPT-2 tokens, many passes: the bare encoder-decoder with rotary positions in every attention (self and cross)
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_none_rotary"
rotary = True
