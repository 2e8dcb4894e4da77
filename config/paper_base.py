# Training schedule of every appendix run of the write-up "Auto-regressive Encoder-Decoder Transformer" (Yan, 2024):
# one A100, 9k steps on Wikipedia. The model files import it.
# These are also train.py's defaults, written out so that the paper runs stay fixed if the defaults change.
dataset = "wikitext103"  # prepare_wikipedia.py --wikitext103: the write-up's token counts
batch_size = 50
gradient_accumulation_steps = 16
max_iters = 9000
learning_rate = 9e-4
decay_lr = True
min_lr = 9e-5
warmup_iters = 300
lr_decay_iters = 700000
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
eval_interval = 500
eval_iters = 200
context_size = 200
dropout = 0.0
bias = False
