"""The ``dprag`` command.

``dprag demo`` runs the offline demo: a DP question-answering run over a
synthetic private corpus, printing each answer with its privacy guarantee.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.budget import Budget, PrivacyBudgetExhausted

__all__ = ["main"]


def _demo(_: argparse.Namespace) -> int:
    accountant = CorpusAccountant(Budget(1.0, 1e-6))
    print("dprag demo: a corpus-level privacy budget of epsilon=1, delta=1e-6")
    for i in range(4):
        try:
            accountant.charge(Budget(0.3))
            print(f"  query {i + 1}: charged epsilon=0.3 -> {accountant!r}")
        except PrivacyBudgetExhausted as exc:
            print(f"  query {i + 1}: refused before any work ({exc})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dprag`` console script."""
    parser = argparse.ArgumentParser(prog="dprag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline demo")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
