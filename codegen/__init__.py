"""llmopt.codegen."""
