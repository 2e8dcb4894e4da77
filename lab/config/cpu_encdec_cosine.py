# CPU scale: encoder-decoder with the cosine-dissimilarity embedding loss
from config.cpu_encdec_none import *
out_dir = "out/cpu_encdec_cosine"
embedding_loss = "cosine"
embedding_loss_coeff = 1.0
