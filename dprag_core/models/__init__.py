"""dprag_core.models."""
