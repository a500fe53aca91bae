"""Data files of the built-in embedding model (see minilm/NOTICE.md)."""
