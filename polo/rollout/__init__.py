"""Continuous-control rollouts (the ``gym`` engine)."""
