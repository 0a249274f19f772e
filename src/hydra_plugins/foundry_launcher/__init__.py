"""foundry's Hydra launchers (Hydra only accepts launcher classes from the `hydra_plugins` package)."""
