"""Web forms, one module per concern."""
