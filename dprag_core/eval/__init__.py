"""dprag_core.eval: evaluation tools (privacy audits in :mod:`dprag_core.eval.audit`)."""
