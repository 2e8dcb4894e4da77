# GPT-2 tokens, many passes: the bare encoder-decoder with its 8 layers split 6 + 2 (the write-up's next step: unequal
# encoder and decoder depths). Same width: 1,460,040 parameters at the 60-article vocabulary, under the baseline's.
from config.cpu_gpt2_encdec_none import *
out_dir = "out/cpu_gpt2_encdec_none_6_2"
n_encoder_layer = 6
n_decoder_layer = 2
