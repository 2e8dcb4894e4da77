"""
Tasks generated in memory, each a module named for its --dataset: `python train.py
--dataset=reversal`. What a task module gives the scripts is listed in data.generated_task; adding a
task is adding a module here.
"""
