"""Training runtime: the resolved job spec, the TRL runner and the Pipes entry point of the trainer process."""
