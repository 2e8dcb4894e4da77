# The write-up's run "with cosine-dissimilarity embedding loss"
from lab.config.paper_encdec_mse import *
out_dir = "out/paper_encdec_cosine"
embedding_loss = "cosine"
