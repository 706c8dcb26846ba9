"""Training loops for policies that are not language models (``kind: control`` recipes, docs/control.md).

A control recipe names a method (``CONTROL_METHODS``): the on-policy loop ``ppo`` (the gym engine, a control
policy, a critic, and the advantage, policy loss and aggregation components of the language-model side) and the
methods whose loop differs. ``ControlTrainer`` (polo.control.trainer) gives every method the run folder, metrics, checkpoints and
``--resume``.
"""
