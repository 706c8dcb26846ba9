"""HarmonyGuard (safety and utility in web agents): its engine, step checker, policy document, dual-objective step
reward and the GuardedKB-v0 environment."""
