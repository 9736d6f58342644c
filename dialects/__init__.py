"""llmopt.dialects."""
