"""Evaluation of a policy on held-out prompts: accuracy (greedy and sampled) and GRUE's task score, naturalness and
diversity."""
