"""The differential harness, D against D + x cell by cell, on llamaindex entry points:
LlamaIndex's DPQueryEngine (query, streaming) and its postprocessors.

The matrix, its diagonal and the full run (``DPRAG_DIFFERENTIAL=full``):
tests/differential/matrix.py; what is compared: tests/differential/observations.py.
"""

from entry_points import cells_test

test_neighbouring_corpora_look_alike = cells_test("llamaindex")
