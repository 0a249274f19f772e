"""foundry: MPT models, data loaders, the trainer, checkpoints and ICL evaluation."""
