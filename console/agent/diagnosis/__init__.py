"""The diagnosis: gather the facts, analyze them in steps, rank findings into a verdict."""
