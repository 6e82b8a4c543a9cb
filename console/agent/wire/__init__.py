"""The wire contract shared by the agent and the console: the only agent package the console imports.

Frame types, frame rules, the agent's config and defaults, the age format, process matching, and the rules
agentless mode shares with the agent's samplers: log lines and batches, GPU holder attribution."""
