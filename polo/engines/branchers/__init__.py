"""The built-in rollout-tree branchers of the ``multi_turn`` engine (``engine.tree``), one module each; the base
class and the registry are in ``polo.engines.branches``."""
