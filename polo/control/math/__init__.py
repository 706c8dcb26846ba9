"""Pure tensor math of the control methods (docs/control.md): distributions, trajectory objectives and the
method-specific estimators; no environments, no networks."""
