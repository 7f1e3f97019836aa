"""Template tags of billing, for other apps' pages."""
