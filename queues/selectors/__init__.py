"""Reads, one module per concern; each model's visibility (who sees what) is decided once here."""
