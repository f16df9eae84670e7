"""What a caller (or an operator, or a server) can observe of one world, and how two compare.

An :class:`Observation` holds everything a cell records in one world, in
four classes:

- **public** (compared always): each ask's outcome (the exception's class and
  message, or ``ok``); the output's keys and the values of every key that is not
  part of the DP release; the corpus budget's rows and status as ``dprag ledger
  history / export / status`` print them; the per-unit ledger's identity and
  refusals, and its rows of units other than x for MuRAG and the ledger filter
  (each unit is charged on its own score); how many prompts were over the
  server's context; the first request to a server or call to a hosted text API
  (made before anything is released); what the host saw during each ask
  (tests/differential/host.py): stdout and stderr at the file-descriptor
  level, the distinct warnings and log records (at DEBUG) seen, the frames (function and
  normalised locals) of every exception that reached the caller or a callback,
  and how many texts a tokenizer read past the public work bound; every
  request to an embedding endpoint (count, bytes, outcome: it carries the
  question only).
- **release** (never compared, only tested for equality): the DP release of
  each ask: the answer's text, the streamed chunks, the details that are a
  post-processing of the release (:data:`RELEASED_DETAILS`), the documents a
  DP selection returned.
- **derived** (compared when every ask released the same in both worlds):
  what is a function of the public inputs and the release: callback, event and
  instrumentation payloads; the requests sent to a server (count, rows,
  fields: a request's prompts hold the documents, and the model endpoint is
  inside the trust boundary, so their widths are not compared, only how many
  are over the server's context); the
  calls to a hosted text API and the requests to a model endpoint (count,
  prompts per request: the schedule; each prompt's outcome is recorded, not
  compared: an endpoint that refuses x's prompt refuses it by construction);
  the tokenizer calls and model forwards of each ask; every warning and log
  record in order (how often one repeats may follow the decoding steps); the
  model sessions' batch sizes and the shapes of the forwards of their steps
  (in process); MuRAG-Ada's
  per-unit ledger rows of units other than x (its charges follow its DP bin
  walk).
- **invariants** (checked on the pair): the rows of a model session whose
  prompt is the same in both worlds show the same tokens, and log-probabilities
  within :data:`ROW_TOLERANCE` of each other, as long as the released prefix is
  the same (bit identity is a property of a CPU's kernels: the engines' own
  tests check it, ``tests/models/test_batch_invariance.py``; what the harness
  holds on every CPU is this bound plus the layout below); a session of as many
  rows in both worlds runs its prefill in the same shapes (the public width,
  never a row's length); the candidates a
  mechanism received differ as the neighbouring relation allows (x added, and
  for a top-n route at most one other unit pushed out).

:func:`differences` lists every deterministic difference; a cell fails on any.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dprag_core.algorithms.contract import PUBLIC_DETAILS

__all__ = [
    "RELEASED_DETAILS",
    "ROW_TOLERANCE",
    "Ask",
    "Observation",
    "differences",
    "normalise",
    "outcome_of",
]

ROW_TOLERANCE = 1e-4
"""How far apart (absolute, in log-probability) the two worlds' outputs of one row whose
prompt is the same may be. A row whose output depends on another row's contents beyond
floating-point rounding moves by far more; a layout chosen by the data shows in the
prefill's shapes, compared exactly. On AVX-512 and on AVX2-only AMD kernels the rows
measured bit-identical; with AVX2 kernels forced on an AVX-512 CPU, a full-width batch
with one short row moved other rows in the last bits."""

RELEASED_DETAILS = frozenset(
    key for key, detail in PUBLIC_DETAILS.items() if "DP" in detail.why or "released" in detail.why
)
"""The ``details`` keys whose values are a post-processing of the DP release (the contract's
own words: "DP-released", "DP output", "a post-processing of the DP-released answer")."""

_PATTERNS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "<addr>"),
    (re.compile(r"\bc[0-9a-f]{12}\b"), "<collection>"),  # store_cases' store names
    (re.compile(r"\bv2_[0-9a-f]{12}\b"), "<table>"),
    (re.compile(r"/tmp/[\w./+-]+"), "<path>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "<time>"),
    (re.compile(r"datetime\.datetime\([^)]*\)"), "<time>"),
    (re.compile(r"\b\d{10}\.\d+\b"), "<time>"),  # epoch seconds
    (re.compile(r"(?<=\w)-[0-9a-f]{8}\b"), "-<id>"),  # store_cases' per-store id suffixes
    (re.compile(r"\bTask-\d+\b"), "Task-<n>"),  # asyncio's task counter
]


def normalise_text(text: str) -> str:
    """``text`` with run ids, addresses, store names, paths and times replaced by tags."""
    for pattern, tag in _PATTERNS:
        text = pattern.sub(tag, text)
    return text


_VOLATILE = frozenset({"time", "timestamp", "last_charge", "id_", "span_id", "run_id",
                       "parent_run_id", "parent_ids", "event_id", "trace_id"})  # fmt: skip


def normalise(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON-like data, volatile fields dropped and texts normalised."""
    if depth > 12:
        return "<deep>"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return normalise_text(value)
    if isinstance(value, BaseException):
        return outcome_of(value)
    if isinstance(value, Mapping):
        return {
            normalise_text(str(k)): normalise(v, depth + 1)
            for k, v in value.items()
            if str(k) not in _VOLATILE
        }
    if isinstance(value, (list, tuple)):
        return [normalise(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(json.dumps(normalise(v, depth + 1), default=str) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return normalise(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, depth + 1
        )
    if hasattr(value, "model_dump"):
        try:
            dumped = value.model_dump()
        except Exception:  # a model that cannot dump itself: its repr
            return normalise_text(repr(value))
        return {"<class>": type(value).__name__, **normalise(dumped, depth + 1)}
    return normalise_text(repr(value))


def outcome_of(error: BaseException | None) -> str:
    """``ok``, or the exception's class and message (normalised)."""
    if error is None:
        return "ok"
    return normalise_text(f"{type(error).__module__}.{type(error).__qualname__}: {error}")


@dataclasses.dataclass
class Ask:
    """One ask of the question in one world.

    ``candidates``: per mechanism call, the (id, unit) of each real document it
    received; ``route``: the mechanism's ``candidates_needed()`` (None: a threshold).
    """

    outcome: str = "ok"
    release: Any = None
    output: Any = None
    events: Any = None
    candidates: list[list[tuple[str, str]]] = dataclasses.field(default_factory=list)
    route: int | None = None
    host: Any = None  # stdout, stderr, warnings, logs during the ask (public; host.py)
    frames: list[Any] = dataclasses.field(default_factory=list)  # of exceptions that reached
    # the caller or a callback (public)
    work: Any = None  # tokenizer inputs past the bound (public); calls, forwards (derived)


@dataclasses.dataclass
class Observation:
    """Everything one world showed (module docstring)."""

    side: str
    x_unit: str
    asks: list[Ask] = dataclasses.field(default_factory=list)
    budget: Any = None  # the corpus budget, as the CLI prints it (public)
    ledger_public: Any = None  # the per-unit ledger's identity and refusals (public)
    ledger_rows: Any = None  # its rows, x's left out: public or derived (ledger_derived)
    ledger_derived: bool = False
    requests: Any = None  # what the server double received (derived)
    over_context: int = 0  # prompts over the server's context (public)
    first_call: Any = None  # the first request to a server or call to a hosted API: made
    # before anything is released, so a function of public inputs alone (public)
    hosted: Any = None  # calls to a hosted text API (derived)
    sessions: Any = None  # each model session's batch size (derived)
    rows: list[Any] = dataclasses.field(default_factory=list)  # RowLogs (invariant)
    embedding: Any = None  # requests to an embedding endpoint during the asks (public)
    endpoint: Any = None  # requests to a model endpoint: schedule and outcomes (derived)

    def public(self) -> dict[str, Any]:
        host = {
            f"ask {i + 1}: {channel}": (a.host or {}).get(channel)
            for i, a in enumerate(self.asks)
            for channel in ("stdout", "stderr")
        }
        host |= {
            f"ask {i + 1}: {channel}": _distinct((a.host or {}).get(channel))
            for i, a in enumerate(self.asks)
            for channel in ("warnings", "logs")
        }
        return {
            **{f"ask {i + 1}: outcome": a.outcome for i, a in enumerate(self.asks)},
            **{f"ask {i + 1}: output": a.output for i, a in enumerate(self.asks)},
            **host,
            **{f"ask {i + 1}: frames": a.frames for i, a in enumerate(self.asks)},
            **{
                f"ask {i + 1}: work past the bound": (a.work or {}).get("over_bound")
                for i, a in enumerate(self.asks)
            },
            "embedding requests": self.embedding,
            "corpus budget (dprag ledger)": self.budget,
            "per-unit ledger (identity, refusals)": self.ledger_public,
            "per-unit ledger rows (x left out)": None if self.ledger_derived else self.ledger_rows,
            "prompts over the server's context": self.over_context,
            "first model request": self.first_call,
        }

    def releases(self) -> list[Any]:
        return [a.release for a in self.asks]

    def derived(self) -> dict[str, Any]:
        return {
            **{f"ask {i + 1}: events": a.events for i, a in enumerate(self.asks)},
            "per-unit ledger rows (x left out)": self.ledger_rows if self.ledger_derived else None,
            "server requests": self.requests,
            "hosted text API calls": self.hosted,
            "model endpoint requests": _schedule(self.endpoint),
            **{
                f"ask {i + 1}: {channel} in order": (a.host or {}).get(channel)
                for i, a in enumerate(self.asks)
                for channel in ("warnings", "logs")
            },
            **{
                f"ask {i + 1}: work": {
                    k: v for k, v in (a.work or {}).items() if k in ("tokenizer_calls", "forwards")
                }
                for i, a in enumerate(self.asks)
            },
            "model sessions": self.sessions,
        }


def _distinct(records: Any) -> Any:
    """The distinct records of a channel, sorted: how often one repeats may follow the
    release (a record per decoding step), which records there are may not."""
    if records is None:
        return None
    return sorted({json.dumps(r, sort_keys=True, default=str) for r in records})


def _schedule(requests: Any) -> Any:
    """A model endpoint's requests without each prompt's outcome or the request's status
    (refused by construction: a request of one prompt ends as that prompt does), in a
    fixed order (one-prompt requests in flight together end in any order)."""
    if requests is None:
        return None
    kept = [{k: v for k, v in r.items() if k not in ("outcomes", "status")} for r in requests]
    return sorted(kept, key=lambda r: json.dumps(r, sort_keys=True))


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where ``a`` and ``b`` first differ, and how (short)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                side = "D" if key in a else "D+x"
                return f"{path}/{key}: only in {side}"
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], f"{path}/{key}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items in D, {len(b)} in D+x"
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            if u != v:
                return _first_difference(u, v, f"{path}[{i}]")
    return f"{path}: D {_short(a)} | D+x {_short(b)}"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def _same_row(a: Any, b: Any) -> bool:
    """Two outputs of one row: tokens equal; log-probabilities within ROW_TOLERANCE."""
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)) or not np.array_equal(
        a[~finite], b[~finite]
    ):
        return False
    return bool(np.all(np.abs(a[finite] - b[finite]) <= ROW_TOLERANCE))


def _row_differences(d: Sequence[Any], dx: Sequence[Any]) -> list[str]:
    """Rows whose prompt is the same in both worlds must show the same, while the release is."""
    out = []
    for s, (a, b) in enumerate(zip(d, dx, strict=False)):
        for t, ((prefix_a, rows_a), (prefix_b, rows_b)) in enumerate(
            zip(a.reads, b.reads, strict=False)
        ):
            if prefix_a != prefix_b:
                break
            shown_a: dict[str, list[Any]] = {}
            shown_b: dict[str, list[Any]] = {}
            for prompt, row in zip(a.prompts, rows_a, strict=True):
                shown_a.setdefault(prompt, []).append(row)
            for prompt, row in zip(b.prompts, rows_b, strict=True):
                shown_b.setdefault(prompt, []).append(row)
            moved = [
                p
                for p in shown_a
                if p in shown_b and not all(_same_row(u, v) for u in shown_a[p] for v in shown_b[p])
            ]
            if moved:
                out.append(
                    f"rows: session {s}, read {t}: {len(moved)} row(s) whose prompt is the same "
                    "in D and D+x show different outputs (a row depends on the other rows)"
                )
                break
    return out


def _layout_differences(d: Sequence[Any], dx: Sequence[Any]) -> list[str]:
    """Sessions of as many rows in both worlds must prefill in the same shapes."""
    return [
        f"prefill layout: session {s}: D {_short(a.prefill)} | D+x {_short(b.prefill)}"
        for s, (a, b) in enumerate(zip(d, dx, strict=False))
        if len(a.prompts) == len(b.prompts) and a.prefill != b.prefill
    ]


def _candidate_differences(d: Ask, dx: Ask, x_unit: str, ask: int) -> list[str]:
    """The candidates of D+x: those of D with x added and, top-n, at most one pushed out."""
    out = []
    for call, (a, b) in enumerate(zip(d.candidates, dx.candidates, strict=False)):
        units_a, units_b = {u for _, u in a}, {u for _, u in b}
        gone, new = units_a - units_b, units_b - units_a - {x_unit}
        pushed = len(gone) > (0 if d.route is None else 1) or (gone and x_unit not in units_b)
        if new or pushed:
            out.append(
                f"candidates: ask {ask}, call {call}: D+x lost {sorted(gone)} and gained "
                f"{sorted(new)} besides x (the relation allows x in and, top-n, one unit out)"
            )
    if len(d.candidates) != len(dx.candidates):
        out.append(f"candidates: ask {ask}: {len(d.candidates)} mechanism calls in D, "
                   f"{len(dx.candidates)} in D+x")  # fmt: skip
    return out


def differences(d: Observation, dx: Observation) -> list[str]:
    """Every deterministic difference between the two worlds (module docstring)."""
    out = []
    public_d, public_dx = d.public(), dx.public()
    for key in public_d:
        if public_d[key] != public_dx[key]:
            out.append(f"{key}: " + _first_difference(public_d[key], public_dx[key]))
    if d.releases() == dx.releases():  # the same release: what follows from it too
        derived_d, derived_dx = d.derived(), dx.derived()
        for key in derived_d:
            if derived_d[key] != derived_dx[key]:
                out.append(f"{key}: " + _first_difference(derived_d[key], derived_dx[key]))
    out += _row_differences(d.rows, dx.rows)
    out += _layout_differences(d.rows, dx.rows)
    for i, (a, b) in enumerate(zip(d.asks, dx.asks, strict=True)):
        out += _candidate_differences(a, b, dx.x_unit, i + 1)
    return out


def public_part(details: Mapping[str, Any]) -> dict[str, Any]:
    """The details that are not part of the release (parameters, ids, anything unknown)."""
    return {k: v for k, v in details.items() if k not in RELEASED_DETAILS}


def released_part(details: Mapping[str, Any]) -> dict[str, Any]:
    """The details that are a post-processing of the release."""
    return {k: v for k, v in details.items() if k in RELEASED_DETAILS}
