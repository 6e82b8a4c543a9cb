"""The agent's samplers: GPUs (NVML, its simulator, container pid mapping), processes, logs, log reads."""
