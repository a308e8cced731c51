"""Base models: the built-in tiny Llama and the registry that resolves any base-model id to weights."""
