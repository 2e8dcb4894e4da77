# CPU scale: encoder-decoder with the MSE embedding loss
from config.cpu_encdec_none import *
out_dir = "out/cpu_encdec_mse"
embedding_loss = "mse"
embedding_loss_coeff = 1.0
