"""llmopt.lowering."""
