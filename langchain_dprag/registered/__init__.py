"""The LangChain stores dprag registers itself: one module per store, each calling ``register``.

Each module describes one store (:class:`~langchain_dprag.stores.LangChainStore`):
what its raw scores are, how its search is exact, how that search is restricted
to a public partition's cells, what it refuses and the fix, how many vectors it
holds and their dimension. :data:`~langchain_dprag.stores.STORES` imports them on
first use; none imports its store's package until a store of its kind is read.
A store of your own is registered the same way, from your own module
(docs/new-store.md).

>>> from langchain_dprag.stores import STORES
>>> "InMemoryVectorStore" in STORES.labels()
True
"""
