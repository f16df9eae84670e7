"""What ``dprag ledger`` shows: a store's status as text or JSON, its history, a spend plot.

Amounts are printed exactly as the store keeps them (epsilon to the
pico-epsilon, delta to the atto-delta: :func:`amount`), never rounded: a spend
of 2.500001999999 reads so, not 2.5, and an exhausted budget reads 0; times
are UTC. Exports hold query
ids and unit ids, so files are written owner-only (0600).

>>> from dprag_core.accounting.status import BudgetStatus
>>> from dprag_core.budget import Budget
>>> s = BudgetStatus("corpus budget 'c' in '/b.db'", "c", Budget(2.0), 2.0, 0.0, 0.0, 0.0, 4, 1,
...                  None)
>>> print("\\n".join(status_lines(s)))
corpus budget 'c' in '/b.db' (name 'c')
  total        epsilon=2  delta=0
  spent        epsilon=2  delta=0
  remaining    epsilon=0  delta=0  (exhausted)
  queries      4
  refusals     1
  last charge  never
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dprag_core.accounting.status import HISTOGRAM_BINS, BudgetStatus, LedgerStatus
from dprag_core.validation import missing_extra

__all__ = [
    "amount",
    "export_rows",
    "plot_spend",
    "status_json",
    "status_lines",
    "utc",
    "write_private",
]

_BAR = 40


def utc(seconds: float | None) -> str:
    """A UNIX time as ISO 8601 UTC to the second ("never" for None).

    >>> utc(0.0), utc(None)
    ('1970-01-01T00:00:00+00:00', 'never')
    """
    if seconds is None:
        return "never"
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")


def amount(value: float, *, decimals: int = 12) -> str:
    """``value`` to ``decimals`` places (a store's unit: 12 for epsilon, 18 for delta),
    trailing zeros dropped: the stored integer exactly, never rounded to fewer digits.

    >>> amount(2.500001999999), amount(50.0), amount(1e-5, decimals=18), amount(0.0)
    ('2.500001999999', '50', '0.00001', '0')
    """
    text = f"{value:.{decimals}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _pair(epsilon: float, delta: float) -> str:
    return f"epsilon={amount(epsilon)}  delta={amount(delta, decimals=18)}"


def status_lines(status: BudgetStatus | LedgerStatus) -> list[str]:
    """The status of one store, for a terminal."""
    refusals = "not counted by the version that wrote it" if status.refusals is None else ""
    lines = [f"{status.store} (name {status.name!r})"]
    if isinstance(status, BudgetStatus):
        done = "  (exhausted)" if status.exhausted else ""
        lines += [
            f"  total        {_pair(status.total.epsilon, status.total.delta)}",
            f"  spent        {_pair(status.spent_epsilon, status.spent_delta)}",
            f"  remaining    {_pair(status.remaining_epsilon, status.remaining_delta)}{done}",
            f"  queries      {status.queries}",
        ]
    else:
        lines += [
            f"  budget per unit  epsilon={amount(status.budget_per_unit)}",
            f"  units charged    {status.units} ({status.exhausted} exhausted)",
            f"  spent in total   epsilon={amount(status.total_spent)}",
            f"  queries          {status.queries}",
        ]
    width = 12 if isinstance(status, BudgetStatus) else 16
    lines += [
        f"  {'refusals':<{width}} {refusals or status.refusals}",
        f"  {'last charge':<{width}} {utc(status.last_charge)}",
    ]
    if isinstance(status, LedgerStatus):
        lines.append("  units by the share of their budget spent:")
        top = max(status.histogram, default=0) or 1
        for i, count in enumerate(status.histogram):
            low, high = 100 * i // HISTOGRAM_BINS, 100 * (i + 1) // HISTOGRAM_BINS
            close = "]" if i == HISTOGRAM_BINS - 1 else ")"
            bar = "#" * round(_BAR * count / top)
            lines.append(f"    [{low:>3}%, {high:>3}%{close}  {count:>8}  {bar}".rstrip())
    return lines


def status_json(status: BudgetStatus | LedgerStatus) -> dict[str, Any]:
    """The status as plain JSON values (``kind`` says which store).

    >>> from dprag_core.accounting.status import LedgerStatus
    >>> status_json(LedgerStatus("l", "l", 1.0, 0, 0, 0.0, 0, 0, None, (0,) * 10))["kind"]
    'per-unit ledger'
    """
    data = asdict(status)
    data["kind"] = "corpus budget" if isinstance(status, BudgetStatus) else "per-unit ledger"
    if isinstance(status, BudgetStatus):
        data["total"] = {"epsilon": status.total.epsilon, "delta": status.total.delta}
    return data


def export_rows(rows: Iterable[Any], fields: Sequence[str], fmt: str) -> str:
    """Audit rows (dataclasses with ``fields`` and a UNIX ``time``) as CSV or JSON text.

    >>> from dprag_core.accounting.status import ChargeRecord
    >>> print(export_rows([ChargeRecord("q1", 0.5, 0.0, 0.0)],
    ...                   ("query_id", "epsilon", "delta", "time"), "csv"), end="")
    query_id,epsilon,delta,time,utc
    q1,0.5,0.0,0.0,1970-01-01T00:00:00+00:00
    """
    records = [{f: getattr(r, f) for f in fields} | {"utc": utc(r.time)} for r in rows]
    if fmt == "json":
        return json.dumps(records, indent=1) + "\n"
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*fields, "utc"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, a new file being owner-only (0600) whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def plot_spend(
    path: str | os.PathLike[str],
    title: str,
    events: Sequence[tuple[float, float, str]],
    *,
    limit: float | None,
    budget_per_unit: float | None = None,
) -> None:
    """Plot the cumulative epsilon spent over time (and, for a ledger, units exhausted).

    ``events``: (time, epsilon, unit) per charged row, oldest first (unit ""
    for a corpus budget); ``limit``: the corpus total drawn as a line.
    Needs matplotlib (``pip install 'dprag[eval]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise missing_extra("--plot", exc, extra="eval") from exc
    times = [datetime.fromtimestamp(t, tz=timezone.utc) for t, _, _ in events[:1]]
    times += [datetime.fromtimestamp(t, tz=timezone.utc) for t, _, _ in events]
    total, spent = 0.0, [0.0] * len(events[:1])
    per_unit: dict[str, float] = {}
    gone = 0
    exhausted = [gone] * len(events[:1])
    cap = (budget_per_unit or 0.0) * (1 - 1e-12)  # float sums of exact integer amounts
    for _, eps, unit in events:
        total += eps
        spent.append(total)
        before = per_unit.get(unit, 0.0)
        per_unit[unit] = before + eps
        gone += before < cap <= before + eps
        exhausted.append(gone)
    rows = 2 if budget_per_unit is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 3 * rows), sharex=True, squeeze=False)
    ax = axes[0][0]
    ax.step(times, spent, where="post", label="epsilon spent")
    if limit is not None:
        ax.axhline(limit, color="red", linestyle="--", label=f"total {limit:g}")
    ax.set_ylabel("epsilon (cumulative)")
    ax.set_title(title)
    ax.legend(loc="upper left")
    if budget_per_unit is not None:
        axes[1][0].step(times, exhausted, where="post", color="purple")
        axes[1][0].set_ylabel("units exhausted")
    axes[-1][0].set_xlabel("time (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(Path(path), dpi=100)
    plt.close(fig)
