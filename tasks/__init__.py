"""Tasks made in memory, a module per --dataset=NAME; what one gives: data.generated_task."""
