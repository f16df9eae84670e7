"""Run differential cells in a process of their own and print their differences as JSON.

For kernels that must be chosen before torch is imported (``ATEN_CPU_CAPABILITY``
and friends): tests/differential/test_kernels.py starts this script with them
set. Stores that need PostgreSQL are not supported here.

    ATEN_CPU_CAPABILITY=avx2 python tests/differential/run_cells.py "<cell id>" ...
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE, HERE.parent, HERE.parent / "langchain", HERE.parent / "llamaindex",
               HERE.parent / "stores"):  # fmt: skip
    sys.path.insert(0, str(folder))


def main(ids: list[str]) -> dict[str, list[str]]:
    """Each cell's differences (an empty list: none), by cell id."""
    import torch
    from entry_points import compare
    from matrix import full_matrix
    from tiny_models import build_model, build_tokenizer
    from worlds import Lab

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    lab = Lab({k: build_model(k, tokenizer) for k in ("gpt2", "llama", "qwen2")}, tokenizer)
    cells = {c.id: c for c in full_matrix()}
    folder = Path(tempfile.mkdtemp(prefix="dprag-cells-"))
    return {i: compare(cells[i], lab, folder / str(n), None) for n, i in enumerate(ids)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
