"""Reads: the evidence quota decisions rest on."""
