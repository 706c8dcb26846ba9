"""CIPO, "Counterfactual Imagination Policy Optimization": its advantage, its counterfactual brancher and the
skill mining that names its tool granularities."""
