"""Switching from the MosaicML stack: llm-foundry YAMLs (`foundry.compat.llmfoundry`) and Composer checkpoints
(`foundry.compat.composer`) read here."""
