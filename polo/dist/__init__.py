"""Scale-out on existing engines: Ray rollout and reward workers, torch.distributed data-parallel learners,
asynchronous generation (docs/scaling.md)."""
