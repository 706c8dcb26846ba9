"""RAPO, Relative-Absolute Policy Optimization (arXiv:2509.21871): its score inputs and its shaping terms."""
