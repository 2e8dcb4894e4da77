# CPU scale: baseline with 0.2 dropout (the write-up's "0.2 dropout baseline")
from config.cpu_baseline import *
out_dir = "out/cpu_dropout_baseline"
dropout = 0.2
