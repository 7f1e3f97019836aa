"""`manage.py` commands that billing provides."""
