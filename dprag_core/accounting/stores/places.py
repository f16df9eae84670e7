"""Where SQLite budgets live: found by the corpus's name, never by the working directory.

A corpus budget (and a per-unit ledger) must be reached from every working
directory and every process of the host that serves the corpus, or the open
must fail loudly: a relative path such as ``"budget.db"`` names another file
in every directory a program starts from, and ``create=True`` would quietly
give each one a fresh budget. So:

* **The budget directory.** A store opened by its name alone
  (``SQLiteCorpusAccountant(name="records", ...)``, ``dprag ledger init
  --name records``) lives in :func:`budget_dir`: ``$DPRAG_BUDGET_DIR``, else
  ``$XDG_DATA_HOME/dprag``, else ``~/.local/share/dprag`` (created owner-only,
  0700), in the file ``<name>.db``, whatever the working directory.
* **One store per name.** A store created with ``create=True`` and a
  ``name`` (the corpus's identity) is registered under its kind and name in
  the directory's ``names/`` register, with its absolute path and table.
  Creating a store of that kind and name anywhere else on the host is
  refused, naming the one that exists, as long as that file exists (deleting
  a budget's file is the one way to retire it). Opening by name reaches the
  registered store wherever it was created. A store created without a name
  (at an absolute path) names no corpus, so nothing is registered or checked
  for it: name your corpus's budget.
* **No relative path is created.** ``create=True`` with a relative path is
  refused before anything is written (:func:`creatable_path`).

The register is per user and per host, as a SQLite file is: several hosts
share a budget through PostgreSQL.

>>> default_path("records") == budget_dir() / "records.db"
True
>>> creatable_path("budget.db")
Traceback (most recent call last):
...
ValueError: path 'budget.db' is relative: ...
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from dprag_core.accounting.stores.amounts import check_name
from dprag_core.accounting.stores.errors import LedgerUnavailable

try:  # POSIX only; elsewhere the register is written without a lock
    import fcntl
except ImportError:  # pragma: no cover - depends on the platform
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BUDGET_DIR_ENV",
    "Registered",
    "budget_dir",
    "claim",
    "creatable_path",
    "default_path",
    "locate",
    "registered",
    "repoint",
]

BUDGET_DIR_ENV = "DPRAG_BUDGET_DIR"
"""The environment variable that sets the budget directory (an absolute path)."""

_KINDS = {"corpus budget": "corpus", "per-unit ledger": "ledger"}


def budget_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user budget directory (module docstring) under ``environ`` (default: this
    process's environment); not created here.

    >>> str(budget_dir({"DPRAG_BUDGET_DIR": "/srv/dprag"}))
    '/srv/dprag'
    >>> str(budget_dir({"XDG_DATA_HOME": "/home/ann/.data"}))
    '/home/ann/.data/dprag'
    >>> budget_dir({"DPRAG_BUDGET_DIR": "budgets"})
    Traceback (most recent call last):
    ...
    ValueError: DPRAG_BUDGET_DIR must be an absolute path, got 'budgets'
    """
    env = os.environ if environ is None else environ
    chosen = env.get(BUDGET_DIR_ENV, "")
    if chosen:
        if not os.path.isabs(chosen):
            raise ValueError(f"{BUDGET_DIR_ENV} must be an absolute path, got {chosen!r}")
        return Path(chosen)
    data = env.get("XDG_DATA_HOME", "")
    if data and os.path.isabs(data):  # the XDG spec ignores a relative value
        return Path(data) / "dprag"
    return Path.home() / ".local" / "share" / "dprag"


def default_path(name: str) -> Path:
    """The file of a store opened by its name alone: ``<budget_dir>/<name>.db``."""
    return budget_dir() / f"{check_name(name)}.db"


def creatable_path(path: str | os.PathLike[str]) -> Path:
    """``path``, refused when relative: a store is created only at an absolute path.

    A relative path names another file in every working directory, so each
    directory a program starts from would create a fresh budget.
    """
    given = Path(path)
    if not given.is_absolute():
        raise ValueError(
            f"path {str(path)!r} is relative: creating a budget there would create another "
            "one in every working directory a program starts from. Open it by its name "
            "instead (name='...', no path: it is kept in the per-user budget directory, "
            f"${BUDGET_DIR_ENV}, found from any directory) or give an absolute path"
        )
    return given


@dataclass(frozen=True)
class Registered:
    """Where the store of one kind and name was created: its absolute file and catalog key."""

    path: Path
    store: str


def _entry(kind: str, name: str) -> Path:
    return budget_dir() / "names" / f"{_KINDS.get(kind, 'store')}-{check_name(name)}.json"


def registered(kind: str, name: str) -> Registered | None:
    """The registered store of ``kind`` named ``name`` whose file still exists, else None."""
    try:
        data = json.loads(_entry(kind, name).read_text(encoding="utf-8"))
        found = Registered(Path(data["path"]), str(data["store"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if found.path.exists() else None


def locate(kind: str, name: str, store: str) -> Path:
    """The file of the store of ``kind`` named ``name``: registered, else the default one.

    A registered store under another catalog key (another table) is refused,
    naming the table it has.
    """
    found = registered(kind, name)
    if found is None:
        return default_path(name)
    if found.store != store:
        table = found.store.split(":", 1)[-1]
        raise ValueError(
            f"the {kind} named {name!r} is kept in {str(found.path)!r} under table {table!r}: "
            f"pass table={table!r} (or its path)"
        )
    return found.path


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    """The register's folder (created 0700), held under an exclusive lock."""
    folder = budget_dir() / "names"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise LedgerUnavailable(
            f"the budget directory {str(folder.parent)!r} cannot be written ({exc.strerror}): "
            f"set {BUDGET_DIR_ENV} to a directory this user can write"
        ) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder
    finally:
        os.close(fd)


def repoint(kind: str, name: str, path: Path, store: str) -> None:
    """Register the store ``kind``/``name`` at its new ``path`` (``dprag ledger move``)."""
    with _locked():
        entry = _entry(kind, name)
        data = {"path": str(path.resolve()), "store": store, "created": time.time()}
        partial = entry.with_name(f".{entry.name}.{os.getpid()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.chmod(partial, 0o600)
        partial.replace(entry)


@contextlib.contextmanager
def claim(kind: str, name: str, path: Path, store: str) -> Iterator[None]:
    """Create (or open) the store ``kind``/``name`` at ``path`` as the one of its name.

    Refuses (``LedgerUnavailable``) when another file (or table) that still
    exists is registered under this kind and name; otherwise runs the body
    (which creates or opens the store) and registers ``path`` if the body
    succeeded. The check, the creation and the registration hold one lock, so
    two processes cannot create two stores of one name.
    """
    here = Registered(path.resolve(), store)
    with _locked():
        found = registered(kind, name)
        if found is not None and (found.path.resolve(), found.store) != (here.path, store):
            where = found.path if found.store == store else f"{found.path} (table {found.store})"
            raise LedgerUnavailable(
                f"a {kind} named {name!r} already exists in {str(where)!r}: a corpus has one "
                f"budget, so no second one is created. Open that one (by its path, or by "
                f"name={name!r} alone), or give a new corpus a name of its own"
            )
        yield
        if found is None:
            entry = _entry(kind, name)
            data = {"path": str(here.path), "store": store, "created": time.time()}
            partial = entry.with_name(f".{entry.name}.{os.getpid()}")
            partial.write_text(json.dumps(data), encoding="utf-8")
            os.chmod(partial, 0o600)
            partial.replace(entry)
