"""Textual widgets and screens of the console (rendering only; the data lives in console.core.state)."""
