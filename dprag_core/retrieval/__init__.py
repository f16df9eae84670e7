"""dprag_core.retrieval."""
