"""VSPO, "Value-based Sampling Policy Optimization and Progressive Reward Shaping" (arXiv:2512.07478): its
value-based prompt sampler and its advantage."""
