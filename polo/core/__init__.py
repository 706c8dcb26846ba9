"""Pure tensor math of policy optimization (torch only): batch, registries, advantages, losses."""
