# The write-up's "0.2 dropout baseline"
from config.paper_baseline import *
out_dir = "out/paper_dropout_baseline"
dropout = 0.2
