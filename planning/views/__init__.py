"""Web pages, one module per concern."""
