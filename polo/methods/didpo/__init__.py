"""DiDPO, "Diff-in-Diff Policy Optimization" for coding agents: its advantage, the mining of sub-diff anchors and
the ``diff_anchor`` input."""
