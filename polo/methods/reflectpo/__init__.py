"""ReflectPO, "Reflection-guided Policy Optimization": its advantage and its recovery brancher."""
