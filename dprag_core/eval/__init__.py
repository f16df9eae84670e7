"""dprag_core.eval: the demo and utility bench, not a privacy tool.

The synthetic private corpus (:mod:`~dprag_core.eval.synthetic`), answer
metrics (:mod:`~dprag_core.eval.metrics`), attacks (:mod:`~dprag_core.eval.attacks`,
:mod:`~dprag_core.eval.mia`), offline embeddings (:mod:`~dprag_core.eval.embeddings`)
and the workbench the CLI demo and ``benchmarks/`` run on
(:mod:`~dprag_core.eval.workbench`). The statistical privacy audit every
mechanism's test uses is :mod:`dprag_core.audit`.
"""
