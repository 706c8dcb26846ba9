"""Simulators for control policies: gymnasium environments (the classic-control set, and polo's own demos of
the control methods, registered under ``polo/NAME-v0``) and vectorised construction with the usual wrappers.

gymnasium is the optional extra ``polo[control]``; nothing here imports it until an environment is made.
"""
