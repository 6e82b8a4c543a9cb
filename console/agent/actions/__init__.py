"""What the agent does on request: restart, signals, probes, and the action journal."""
