"""Engines that turn a policy and prompts into rollouts."""
from polo.rollout.sampler import SampleOutput, sample

__all__ = ["SampleOutput", "sample"]
