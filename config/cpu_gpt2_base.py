# CPU scale in the regime of the write-up "Auto-regressive Encoder-Decoder Transformer": GPT-2
# tokens, many passes over a small text, train loss far below val loss. About 10 minutes per run on
# one core of a 2-core x86 CPU. Prepare the data once (WikiText-2's validation text, GPT-2 tokens
# renumbered to the 13,873 that occur):
#   python prepare_wikipedia.py --wikitext2=valid --tokenizer=gpt2 --compact_vocab
# Offline, from your copy of WikiText-2's valid.txt (checked: the same dataset), add
# --input=PATH/valid.txt. As in the write-up, each encoder-decoder has at most the parameters of
# cpu_gpt2_baseline.py (checked by the tests).
dataset = "wikitext2_valid_gpt2c"
# the compacted GPT-2 vocabulary (what data/wikitext2_valid_gpt2c/meta.json says)
vocab_size = 13873
device = "cpu"
dtype = "float32"
context_size = 128
batch_size = 16
gradient_accumulation_steps = 1
max_iters = 1200  # about 10 passes over the 240,087 training tokens
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 50
lr_decay_iters = 100000  # as in the write-up: warm up, then an almost constant learning rate
eval_interval = 50
eval_iters = 0  # every val token once
log_interval = 100
