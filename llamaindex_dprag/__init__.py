"""LlamaIndex adapters for dprag (DP query engine, DP node postprocessors)."""
