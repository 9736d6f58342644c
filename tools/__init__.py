"""llmopt.tools."""
