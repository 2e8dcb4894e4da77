# The reversal task with the write-up's shape: 13 + 13 layers, 150 wide, 5 heads (8,226,750
# parameters), where `python train.py --dataset=reversal` trains the walk-through's 2 + 2 layers of
# 64 (235,328 parameters). The rest (the schedule, seed 0) is tasks/reversal.py's DEFAULTS; this
# model needs 34 times the compute per token.
dataset = "reversal"
out_dir = "out/reversal_paper"
n_layer = 13
n_embed = 150
n_head = 5
