"""Resumable passes over a store after an upgrade: re-tokenize, re-embed turns, give long
memories their passages."""
