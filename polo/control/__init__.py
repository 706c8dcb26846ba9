"""Continuous control: policies that are not language models, trained in gymnasium environments
(``kind: control`` recipes, docs/control.md).

Inner layers, lowest first (tests/control/test_control_layers.py): ``math`` (pure tensor math) → ``envs``
(simulators) and ``policies`` (networks) → ``engines`` (rollouts) → ``methods`` (training loops) → ``recipe``
(the YAML format) → ``trainer`` (the run folder) → ``commands`` (what ``polo train|eval|config`` do with a
control recipe or run). ``recipes/`` holds the shipped recipes.
"""
