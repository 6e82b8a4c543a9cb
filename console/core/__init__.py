"""The fleet core, free of any UI: controller, state, statuses, actions, audit, reloads."""
