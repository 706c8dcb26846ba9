"""OPO, "Learning Where to Look" (Observation Policy Optimization): its advantage and its observation brancher."""
