"""Test suites for code written outside dprag: subclass them in your own tests (needs pytest).

- :mod:`dprag_core.testing.stores`: the store suites (score semantics, exact
  ranking, ties, filters, partitioned search, D vs D + x) for a vector store
  registered with the LangChain or LlamaIndex store registry (``docs/new-store.md``);
- :mod:`dprag_core.testing.mechanisms`: a mechanism's contract, its exact
  output law, and a worst-case audit with a mutation hook
  (``docs/new-mechanism.md``);
- :mod:`dprag_core.testing.models`: the public envelope around a text model of
  your own.

Install the extra that ships them: ``pip install 'dprag[testing]'``. The modules
import pytest and the framework they test; ``import dprag_core`` imports none of them.
"""
