# The write-up's run "with MSE embedding loss"
from config.paper_encdec_none import *
out_dir = "out/paper_encdec_mse"
embedding_loss = "mse"
embedding_loss_coeff = 1.0
embedding_ln = "init"
encoder_out_ln = True
detach = "encoder_out"
