"""SRPO, "Unifying Group-Relative and Self-Distillation Policy Optimization via Sample Routing": its advantage and
its self-distillation regularizer."""
