"""dprag_core.accounting."""
