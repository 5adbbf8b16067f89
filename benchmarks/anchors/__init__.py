"""Anchors: the same model, data and training step in the framework a user would pick instead."""
