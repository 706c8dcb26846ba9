"""SOPO, "Socratic-guided Policy Optimization": the engine whose teacher answers a wrong attempt with a hint (its
advantage, the turn-based scaling, is ``polo/core/advantages/sopo.py``)."""
