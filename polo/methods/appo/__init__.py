"""APPO, "Agentic Procedural Policy Optimization" (arXiv:2606.12384): its advantage and its token brancher."""
