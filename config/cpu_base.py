# CPU-scale versions of the runs of the write-up "Auto-regressive Encoder-Decoder Transformer" (Yan,
# 2024): the WikiText-2 validation text split by article, byte tokens, ~2 minutes each on a 2-core
# CPU. Prepare the data once (downloads 1.1 MB):
#   python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte  # -> data/wikitext2_valid_byte/
# Offline, from your copy of WikiText-2's valid.txt (checked: the same dataset), add
# --input=PATH/valid.txt. As in the write-up, each encoder-decoder has at most the parameters of
# cpu_baseline.py (checked by the tests).
dataset = "wikitext2_valid_byte"
vocab_size = 256  # byte tokens (also what data/wikitext2_valid_byte/meta.json says)
device = "cpu"
dtype = "float32"
context_size = 128
batch_size = 16
gradient_accumulation_steps = 1
max_iters = 300
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 20
lr_decay_iters = 300
eval_interval = 100
eval_iters = 20
log_interval = 50
