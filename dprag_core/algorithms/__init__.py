"""dprag_core.algorithms."""
