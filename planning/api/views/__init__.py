"""API views, one module per concern."""
