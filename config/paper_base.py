# Training schedule of every appendix run of the write-up "Auto-regressive Encoder-Decoder
# Transformer" (Yan, 2024): one A100, 9k steps on Wikipedia. The model files import it. These are
# also train.py's defaults, written out so that the paper runs stay fixed if the defaults change,
# except the split of each step: the write-up's 50 x 16 sequences as 200 x 4, the same 800 sequences
# in four larger launches (a step's sequences do not depend on the split; the memory of 200
# sequences is unmeasured yet; on a smaller GPU, or 8 processes: --batch_size=100
# --gradient_accumulation_steps=8, or 50 and 16).
dataset = "wikitext103"  # `python prepare_wikipedia.py`: the write-up's token counts
batch_size = 200
gradient_accumulation_steps = 4
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
eval_iters = 50  # batches of 200: the write-up's 10,000 sequences per split
context_size = 200
dropout = 0.0
bias = False
