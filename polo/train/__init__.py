"""The trainer: composes task, policy, rollout and core math into one training step."""
