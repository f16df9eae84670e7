"""The host-wide record of SQLite budgets: one budget per corpus name, whatever HOME or user.

A per-user register (:mod:`~dprag_core.accounting.stores.places`) cannot stop a
second budget of the same corpus: another ``HOME`` or ``XDG_DATA_HOME``, another
user, a copy opened by its path, a moved file or a deleted register each start
from an empty register. So every SQLite budget created with a ``name`` is also
recorded in a directory that every user and every home shares, the **registry**:
``$DPRAG_BUDGET_REGISTRY``, else ``/var/lib/dprag/registry`` when that directory
exists (an administrator creates it once: ``install -d -m 1777
/var/lib/dprag/registry``; a given ``$DPRAG_BUDGET_REGISTRY`` is created with
that mode). Mode 1777 (sticky, like ``/tmp``) lets every user add entries and
no user remove or replace another's.

An entry ``<kind>-<name>.json`` holds the budget file's absolute path, its
random identity (the file header's, :mod:`~dprag_core.accounting.stores.sqlite`),
the creating user's uid and the time. Then:

* **creating** a budget of that kind and name anywhere else is refused before
  anything is written, naming the recorded file; creating it again where the
  recorded file has disappeared is refused too: a budget that existed is never
  re-initialised (restore it from its backup);
* **opening it to charge** is refused when the file is not the recorded one: a
  copy (same identity, another path), a moved file (``dprag ledger move`` moves
  a budget and its record together), or another file at the recorded path
  (another identity). Read-only opens (a backup's inspection) are not refused.

A PostgreSQL store is recorded there too when its owner opens it with
``create=True`` (``dprag ledger init``), under its location (server, database,
schema and table prefix) with its identity (the time its ``{table}_store`` row
records it was created): ``create=True`` of an absent store at a recorded
location is refused (a dropped database or table is never silently
re-initialised), and a store at a recorded location whose identity differs
(made again from another host) is refused at open.

Limits (docs/ledgers.md, threat model): a user who can write the registry's
own entries (the entry's owner, root) can delete them; without a registry
(neither the variable nor the directory) only the per-user register holds;
several hosts, or users who must not share a directory, keep a budget in
PostgreSQL.

>>> registry_dir({}) is None or str(registry_dir({})) == "/var/lib/dprag/registry"
True
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dprag_core.accounting.stores.amounts import check_name
from dprag_core.accounting.stores.errors import LedgerUnavailable

__all__ = [
    "REGISTRY_ENV",
    "Entry",
    "bind_postgres",
    "check_create",
    "check_postgres_create",
    "lookup",
    "postgres_location",
    "record",
    "registry_dir",
    "verify",
]

REGISTRY_ENV = "DPRAG_BUDGET_REGISTRY"
"""The environment variable naming the host-wide registry directory (absolute)."""

_DEFAULT = Path("/var/lib/dprag/registry")
_KINDS = {"corpus budget": "corpus", "per-unit ledger": "ledger"}
_FIX = (
    "a corpus has one budget on a host, whatever HOME or user opens it: open that one; "
    "move a budget with `dprag ledger move`; several users or hosts: keep it in PostgreSQL"
)


def registry_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The registry directory (module docstring), created 1777 when the variable names a
    missing one; None when there is none."""
    env = os.environ if environ is None else environ
    chosen = env.get(REGISTRY_ENV, "")
    if not chosen:
        return _DEFAULT if _DEFAULT.is_dir() else None
    if not os.path.isabs(chosen):
        raise ValueError(f"{REGISTRY_ENV} must be an absolute path, got {chosen!r}")
    folder = Path(chosen)
    if not folder.is_dir():
        try:
            folder.mkdir(parents=True)
            os.chmod(folder, 0o1777)
        except FileExistsError:
            pass
        except OSError as exc:
            raise LedgerUnavailable(
                f"the budget registry {chosen!r} cannot be created ({exc.strerror}): "
                f"create it once with `install -d -m 1777 {chosen}`"
            ) from None
    return folder


@dataclass(frozen=True)
class Entry:
    """Where the budget of one kind and name lives on this host, and its identity."""

    path: str
    identity: int
    uid: int


def _file(folder: Path, kind: str, name: str) -> Path:
    return folder / f"{_KINDS.get(kind, 'store')}-{check_name(name)}.json"


def lookup(kind: str, name: str) -> Entry | None:
    """The recorded budget of ``kind`` named ``name``, or None (no entry, or no registry)."""
    folder = registry_dir()
    if folder is None:
        return None
    try:
        data = json.loads(_file(folder, kind, name).read_text(encoding="utf-8"))
        return Entry(str(data["path"]), int(data["identity"]), int(data["uid"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        raise LedgerUnavailable(
            f"the budget registry's entry for the {kind} named {name!r} cannot be read: "
            f"check {str(_file(folder, kind, name))!r}"
        ) from None


def record(kind: str, name: str, path: Path, identity: int, *, replace: bool = False) -> None:
    """Record the budget of ``kind`` named ``name`` at ``path`` (exclusively unless
    ``replace``: a move, by the entry's owner)."""
    folder = registry_dir()
    if folder is None or not identity:
        return
    entry = _file(folder, kind, name)
    data = {"path": str(path.resolve()), "identity": identity, "uid": os.getuid(),
            "created": time.time()}  # fmt: skip
    partial = folder / f".{entry.name}.{os.getpid()}"
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.chmod(partial, 0o644)
    try:
        if replace:
            partial.replace(entry)
        else:
            os.link(partial, entry)  # fails if an entry exists: the first creation wins
    except FileExistsError:
        raise LedgerUnavailable(
            f"a {kind} named {name!r} was recorded on this host meanwhile: {_FIX}"
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def check_create(kind: str, name: str, path: Path) -> None:
    """Before creating ``kind``/``name`` at ``path``: refuse another place, and a recorded
    budget whose file has disappeared (never re-initialised)."""
    entry = lookup(kind, name)
    if entry is None:
        return
    if entry.path != str(path.resolve()):
        raise LedgerUnavailable(
            f"a {kind} named {name!r} already exists on this host in {entry.path!r} "
            f"(created by uid {entry.uid}): {_FIX}"
        )
    if not os.path.exists(entry.path):
        raise LedgerUnavailable(
            f"the {kind} named {name!r} existed in {entry.path!r} and is gone: a budget "
            "that existed is never re-initialised (what it spent is spent); restore it from "
            "its latest backup (sqlite3 .backup) to that path"
        )


def verify(kind: str, name: str, path: Path, identity: int, label: str) -> None:
    """Before charging the ``label`` store: it must be the recorded budget of its name
    (the same file and the same identity), when one is recorded."""
    entry = lookup(kind, name)
    if entry is None:
        return
    here = str(path.resolve())
    if entry.path == here and entry.identity == identity:
        return
    if entry.path == here:
        raise LedgerUnavailable(
            f"the {label} is not the {kind} named {name!r} this host recorded there (another "
            "identity: deleted and made again, or replaced by another file): a budget that "
            "existed is never re-initialised; restore it from its latest backup"
        )
    if entry.identity == identity:
        raise LedgerUnavailable(
            f"the {label} is a copy or a moved file of the {kind} named {name!r} that this "
            f"host keeps in {entry.path!r}: charge that one (a copy grants its budget "
            "again); move a budget with `dprag ledger move`"
        )
    raise LedgerUnavailable(
        f"the {label} is a second {kind} named {name!r}: this host keeps it in "
        f"{entry.path!r} (created by uid {entry.uid}): {_FIX}"
    )


def postgres_location(host: str, port: str, database: str, schema: str, table: str) -> str:
    """Where a PostgreSQL store lives, as the registry records it (no user, no password).

    >>> postgres_location("db", "5432", "app", "dprag", "dprag_ledger")
    'postgresql://db:5432/app#dprag.dprag_ledger'
    """
    return f"postgresql://{host}:{port}/{database}#{schema}.{table}"


def _postgres_file(folder: Path, kind: str, location: str) -> Path:
    key = hashlib.sha256(location.encode("utf-8")).hexdigest()[:32]
    return folder / f"{_KINDS.get(kind, 'store')}-postgres-{key}.json"


def _postgres_entry(kind: str, location: str) -> tuple[Path | None, float | None]:
    """(the entry's file, or None without a registry; the recorded identity, or None)."""
    folder = registry_dir()
    if folder is None:
        return None, None
    entry = _postgres_file(folder, kind, location)
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        if data["location"] != location:
            raise ValueError("another location")
        return entry, float(data["identity"])
    except FileNotFoundError:
        return entry, None
    except (OSError, ValueError, KeyError, TypeError):
        raise LedgerUnavailable(
            f"the budget registry's entry for the PostgreSQL {kind} at {location!r} cannot be "
            f"read: check {str(entry)!r}"
        ) from None


def _gone(kind: str, location: str, entry: Path | None) -> LedgerUnavailable:
    return LedgerUnavailable(
        f"the PostgreSQL {kind} at {location!r} existed (this host's budget registry records "
        "it) and is gone or was made again (a dropped database or table?): a budget that "
        "existed is never re-initialised (what it spent is spent); restore it from its latest "
        f"backup (pg_dump); to retire it for good, its owner removes {str(entry)!r}"
    )


def check_postgres_create(kind: str, location: str) -> None:
    """Before creating the absent PostgreSQL store at ``location``: refuse when this host
    recorded one there (it existed and is gone)."""
    entry, identity = _postgres_entry(kind, location)
    if identity is not None:
        raise _gone(kind, location, entry)


def bind_postgres(kind: str, location: str, identity: float, *, owner: bool) -> None:
    """The PostgreSQL store at ``location`` has ``identity``: refuse another identity than
    the recorded one (a store made again); ``owner`` (``create=True``, ``init``): record it
    when this host has no record of it."""
    entry, recorded = _postgres_entry(kind, location)
    if recorded is not None:
        if recorded != identity:
            raise _gone(kind, location, entry)
        return
    if entry is None or not owner:  # no registry on this host; a serving role records nothing
        return
    data = {"location": location, "identity": identity, "uid": os.getuid(),
            "created": time.time()}  # fmt: skip
    partial = entry.with_name(f".{entry.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.chmod(partial, 0o644)
        os.link(partial, entry)  # the first record wins
    except FileExistsError:  # recorded meanwhile by another process: it must agree
        bind_postgres(kind, location, identity, owner=False)
    except OSError as exc:
        raise LedgerUnavailable(
            f"the budget registry {str(entry.parent)!r} cannot be written ({exc.strerror}): "
            f"make it once with `install -d -m 1777 {entry.parent}`"
        ) from None
    finally:
        partial.unlink(missing_ok=True)
