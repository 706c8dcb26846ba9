"""PRIME, "Process Reinforcement through Implicit Rewards" (arXiv:2502.01456): the implicit-PRM role, the
``process_rewards`` input and its advantage."""
