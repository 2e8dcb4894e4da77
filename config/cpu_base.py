# The runs of "Auto-regressive Encoder-Decoder Transformer" at CPU scale: byte tokens of
# WikiText-2's validation text, ~2 min a run on 2 cores; each encoder-decoder has at most the
# baseline's parameters (tests check it). Data:
#   python prepare_wikipedia.py --wikitext2=valid --tokenizer=byte  # 1.1 MB download; offline, add
#   --input=PATH/valid.txt (your copy of WikiText-2's, checked) -> data/wikitext2_valid_byte/
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
