"""Policies that are not language models: their action heads, value networks and observation statistics.

Each policy is an ``nn.Module`` with the ``ControlPolicy`` contract (``act`` samples actions and returns what
``evaluate`` later needs to score them again); its settings are a registered component
(``CONTROL_POLICIES``, ``policy.name`` in a control recipe) that builds it for an environment's spaces.
"""
