"""dprag_core.mechanisms."""
