"""llmopt.frontend."""
