"""API serializers, one module per concern."""
