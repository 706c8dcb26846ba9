"""VPO, "Vector Policy Optimization" (arXiv:2605.22817): its advantage and the ``answer_rewards`` input."""
