"""Rollout engines of control methods (``engine: {name: gym}`` in a control recipe): a control policy acting in
vectorised environments, handed over as a ``RolloutBatch`` with one row per environment copy."""
