"""Fakes at the GPU/driver boundary (the only place tests fake anything)."""
