"""INSPO, "Agentic Policy Optimization via Instruction-Policy Co-Evolution" (arXiv:2512.01945): its engine and
its instruction proposers."""
