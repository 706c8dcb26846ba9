"""GRUE's evaluation of a policy on held-out prompts: task score, naturalness and diversity (held-out accuracy, which
every engine reports, is polo/engines/accuracy.py)."""
