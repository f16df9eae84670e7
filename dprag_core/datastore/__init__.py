"""dprag_core.datastore."""
