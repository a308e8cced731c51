"""Dataset reading, normalization to one chat schema, validation, splitting and tokenization."""
