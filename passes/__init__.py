"""llmopt.passes."""
