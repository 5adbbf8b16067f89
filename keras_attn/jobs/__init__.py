"""Jobs: a data → model → fit → evaluate → export line each, run by the CLI."""
