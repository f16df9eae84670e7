"""The LlamaIndex vector stores dprag registers itself: one module per store, each calling
``register``.

Each module describes one store (:class:`~llamaindex_dprag.stores.LlamaIndexStore`):
what its similarities are, how its query is exact, how that query is
restricted to a public partition's cells, what it refuses and the fix, how many
vectors it holds. :data:`~llamaindex_dprag.stores.STORES` imports them on first
use; none imports its store's package until a store of its kind is read. A
store of your own is registered the same way, from your own module
(docs/new-store.md).

>>> from llamaindex_dprag.stores import STORES
>>> "SimpleVectorStore" in STORES.labels()
True
"""
