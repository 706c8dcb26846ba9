"""LambdaMix (steerable multi-objective GRPO, one LoRA per objective): its engine, its adapter-mixing policy role
and its advantage."""
