"""LangChain adapters for dprag (DP retriever-plus-generator Runnable, DP retriever)."""
