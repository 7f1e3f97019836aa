"""Writes, one module per concern: the what-if simulator, quota auto-approval."""
