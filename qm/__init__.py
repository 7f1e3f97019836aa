"""`qm`, Quartermaster's command line (qm/cli.py): the REST API from a terminal."""
