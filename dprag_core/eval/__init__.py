"""dprag_core.eval."""
