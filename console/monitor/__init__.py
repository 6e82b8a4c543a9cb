"""Observers of the fleet state: metrics, history, alerts, recording."""
