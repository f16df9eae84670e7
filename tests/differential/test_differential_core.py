"""The differential harness, D against D + x cell by cell, on core entry points:
dprag_core's PrivateRAG (answer, stream).

The matrix, its diagonal and the full run (``DPRAG_DIFFERENTIAL=full``):
tests/differential/matrix.py; what is compared: tests/differential/observations.py.
"""

from entry_points import cells_test

test_neighbouring_corpora_look_alike = cells_test("core")
