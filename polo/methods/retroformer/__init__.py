"""Retroformer (arXiv:2308.02151): its engine, the frozen-actor role, the reflection reward and its task."""
