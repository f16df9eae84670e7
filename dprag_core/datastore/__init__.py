"""DP datastore release for retrieval-augmented inference (DP SimHash)."""

from dprag_core.datastore.keys import embedding_keys, token_distribution_keys
from dprag_core.datastore.simhash import DPSimHashDatastore, SimHashIndex

__all__ = ["DPSimHashDatastore", "SimHashIndex", "embedding_keys", "token_distribution_keys"]
