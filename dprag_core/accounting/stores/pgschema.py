"""A PostgreSQL store's schema: inspection, creation, migration and least-privilege grants.

A store is a set of tables under one prefix (``{table}_meta``,
``{table}_store`` and its own), a ``SECURITY DEFINER`` charge function
(``{table}_charge``, owned by the schema owner, fixed ``search_path``) and an
append-only trigger function, all in one PostgreSQL schema that no other
role can create in (``schema=``, default ``dprag``; checked at every open by
:mod:`~dprag_core.accounting.stores.pgtrust`). ``{table}_store`` records the
store's kind and identity (``name``); ``{table}_meta`` its schema version.

* **Inspection** reads ``pg_class`` and ``pg_proc`` of the store's schema in
  one statement (one snapshot): a store being created by another session is
  seen whole or not at all.
* **Calls** name the charge function with its schema and cast every argument
  to the function's own types, so no overload planted elsewhere (a literal
  0 would otherwise arrive as ``smallint`` and pick one) is ever chosen.
* **Creation and migration** (``create=True``, the owner's job) hold a
  session-level advisory lock on the prefix and start their transaction after
  taking it, so N sessions creating or migrating the same store at once all
  succeed: one creates, the others find it made. A partly missing store is
  never repaired (that would reset budgets). A store an earlier version kept
  in the DSN's own schema (``public``, or the DSN's ``search_path``) is moved
  into the store's schema, once its objects are found to be the owner's.
* **Least privilege.** The serving role gets ``USAGE`` on the schema,
  ``SELECT`` on the tables and ``EXECUTE`` on the charge function, nothing
  else. The charge function takes only the query id and the cost; it refuses
  a negative or oversized cost, reads budgets and totals from the store (a
  caller cannot choose a unit's budget) and stamps the time itself. Migration
  drops every other overload of the charge function. ``grant_to`` must name an
  existing role that is not ``public``, a ``pg_`` role, a superuser, the
  owner, a member of the owner or the schema's owner; it is checked before
  anything is created.

>>> PostgresSpec("per-unit ledger", {"meta": "key text"}, (), "", "text").kind
'per-unit ledger'
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dprag_core.accounting.stores import registry
from dprag_core.accounting.stores.amounts import check_table, open_options
from dprag_core.accounting.stores.errors import LedgerUnavailable, incomplete, reused_id
from dprag_core.accounting.stores.pgtrust import (
    DEFAULT_SCHEMA,
    check_schema,
    check_schema_name,
    ensure_schema,
    not_safe,
    owned_by_another,
)
from dprag_core.accounting.stores.postgres import (
    INIT_HINT,
    PostgresStore,
    PostgresTimeouts,
    psycopg_module,
)
from dprag_core.accounting.stores.retention import check_watermark

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "PRUNED",
    "SCHEMA_VERSION",
    "PostgresBacked",
    "PostgresSchema",
    "PostgresSpec",
    "append_only",
    "check_role",
    "digest_sql",
    "open_postgres",
    "postgres_stores",
]

SCHEMA_VERSION = 8
"""Version 8: a ledger's charge function looks rows up by key only (``enable_seqscan = off``: a
session's cached plans stay on the indexes as the tables grow) and a ledger's claim is one
insert. Version 7: a ledger's claim may commit without waiting for the WAL flush, and a
settle makes such claims durable (:meth:`~dprag_core.accounting.ledger.Ledger.claim`).
Version 6: retention (:mod:`~dprag_core.accounting.stores.retention`): the pruned ids'
digests (``{table}_pruned``), which every charge and claim consults, the watermark in
``{table}_meta``, and append-only triggers that let a log row go only below it. (5: a
ledger keeps its query count (64 counter rows, so charges rarely wait on one another) and
a corpus budget's charges are indexed by time: ``status`` and the last rows are index
reads. 4: a schema of the store's own, owner-checked at every open; schema-qualified,
typed charge calls; a ledger charge refuses repeated units. 3: identity table, refusal
counts, charge functions without caller-chosen budgets.)"""

_LOCK_TAG = "dprag-schema:"
_ROLE = re.compile(r"[a-z_][a-z0-9_]*")
# an index is named without its (its table's) schema
_UNQUALIFIED = frozenset({"audit_query", "charges_at"})
_CATALOG_TYPES = {"bigint": "int8"}  # the names under which pg_catalog knows these types


@dataclass(frozen=True)
class PostgresSpec:
    """One kind of PostgreSQL store.

    ``tables``: suffix -> CREATE TABLE body (``meta`` and ``store`` are added
    by :class:`PostgresSchema`); ``extra``: statements run after the tables
    (indexes, triggers), idempotent; ``charge_sql``: the ``CREATE OR REPLACE
    FUNCTION {charge}`` statement and ``charge_args`` its argument types;
    ``migrate``: idempotent statements bringing an older schema up to date;
    ``added``: tables a later version added (a store without them is
    outdated, and migrating creates them, not incomplete).
    """

    kind: str
    tables: dict[str, str]
    extra: tuple[str, ...]
    charge_sql: str
    charge_args: str
    migrate: tuple[str, ...] = ()
    added: tuple[str, ...] = ()


PRUNED = "digest bigint PRIMARY KEY"
"""The pruned ids' digests (:func:`digest_sql` of each id), append-only."""

_WATERMARK = "(SELECT m.value FROM {meta} AS m WHERE m.key = 'watermark') / 1000000.0"
"""The store's watermark in UNIX seconds (numeric): a log row stamped before it may go."""


def digest_sql(expression: str) -> str:
    """The SQL digest of a query id (the first 8 bytes of its SHA-256, a signed bigint),
    computed by the server for a store's ``pruned`` table.

    >>> digest_sql("q")[:30]
    "('x' || left(encode(pg_catalog"
    """
    return (
        "('x' || left(encode(pg_catalog.sha256(pg_catalog.convert_to("
        f"{expression}, 'UTF8')), 'hex'), 16))::bit(64)::bigint"
    )


def append_only(table: str, *, prunable: bool = False) -> tuple[str, str]:
    """The triggers that make the table ``{table}`` append-only (no update, delete, truncate);
    ``prunable``: a row stamped (``at``) before the store's watermark may be deleted.

    >>> [statement.split(" ON ")[1].split()[0] for statement in append_only("audit")]
    ['{audit}', '{audit}']
    """
    on = "{" + table + "}"
    arg = "'prunable'" if prunable else ""
    return (
        f"CREATE OR REPLACE TRIGGER append_only BEFORE UPDATE OR DELETE ON {on}"
        f" FOR EACH ROW EXECUTE FUNCTION {{fn}}({arg})",
        f"CREATE OR REPLACE TRIGGER append_only_truncate BEFORE TRUNCATE ON {on}"
        " FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
    )


def postgres_stores(store: PostgresStore, schema: str = DEFAULT_SCHEMA) -> list[tuple[str, str]]:
    """(kind, table prefix) of every dprag store in ``schema`` this role may read, by prefix.

    Stores granted to other roles are left out (a serving role sees its own).
    """

    def work(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        sql = psycopg_module().sql
        found = []
        for (relname,) in conn.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r' AND right(c.relname, 6) = '_store'"
            " AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')"
            " AND (SELECT count(*) FROM pg_attribute AS a"
            "   WHERE a.attrelid = c.oid AND a.attname IN ('id', 'kind', 'name')) = 3"
            " ORDER BY 1",
            (schema,),
        ).fetchall():
            prefix = relname[: -len("_store")]
            row = conn.execute(
                sql.SQL("SELECT kind FROM {} WHERE id = 1").format(sql.Identifier(schema, relname))
            ).fetchone()
            if row is not None and _ROLE.fullmatch(prefix):
                found.append((str(row[0]), prefix))
        return found

    return store.run(work)


def check_role(role: object) -> str:
    """The ``grant_to`` role name: a plain lowercase identifier, never ``public`` or ``pg_*``.

    >>> check_role("dprag_app")
    'dprag_app'
    >>> check_role("public")
    Traceback (most recent call last):
    ...
    ValueError: grant_to must name the serving role, not 'public' (that would let every role charge)
    """
    name = check_table(role, "grant_to")
    if name == "public" or name.startswith("pg_"):
        raise ValueError(
            f"grant_to must name the serving role, not {name!r} (that would let every role charge)"
        )
    return name


class PostgresSchema:
    """Names, inspection, creation, migration and grants of one prefixed store.

    >>> spec = PostgresSpec("corpus budget", {"budget": "id integer"}, (), "", "text")
    >>> schema = PostgresSchema("c", spec)
    >>> sorted(schema.tables), schema.schema
    (['budget', 'meta', 'store'], 'dprag')
    """

    def __init__(self, table: str, spec: PostgresSpec, schema: str = DEFAULT_SCHEMA) -> None:
        self.table = check_table(table)
        self.schema = check_schema_name(schema)
        self.spec = spec
        self._composed: dict[tuple[str, str], Any] = {}
        self._call_bytes: bytes | None = None  # the charge call, rendered at its first use
        self._created = 0.0  # the store's identity (its creation time), read at open
        self.tables = {
            "meta": "key text PRIMARY KEY, value bigint NOT NULL",
            "store": "id integer PRIMARY KEY CHECK (id = 1), kind text NOT NULL,"
            " name text NOT NULL, created double precision NOT NULL",
            **spec.tables,
        }

    def names(self) -> dict[str, str]:
        """Suffix -> object name."""
        names = {k: f"{self.table}_{k}" for k in self.tables}
        names.update(
            fn=f"{self.table}_append_only",
            charge=f"{self.table}_charge",
            audit_query=f"{self.table}_audit_query",
            charges_at=f"{self.table}_charges_at",
        )
        return names

    def sql(self, text: str, schema: str | None = None) -> Any:
        """``text`` with ``{suffix}`` placeholders as identifiers, named with their schema.

        ``schema``: another schema than the store's (an earlier version's
        location). Composed once per text (a charge runs the same statement
        every time).
        """
        key = (text, schema or self.schema)
        if key not in self._composed:
            self._composed[key] = self._compose(text, key[1])
        return self._composed[key]

    def _compose(self, text: str, schema: str) -> Any:
        sql = psycopg_module().sql
        ids = {
            k: sql.Identifier(v) if k in _UNQUALIFIED else sql.Identifier(schema, v)
            for k, v in self.names().items()
        }
        return sql.SQL(text).format(tag=sql.Literal(self.table + ":"), **ids)

    # -- inspection --------------------------------------------------------------

    def state(
        self, conn: psycopg.Connection[Any], schema: str | None = None
    ) -> tuple[set[str], bool]:
        """(suffixes of the tables present, whether the schema is current), from one snapshot.

        ``schema``: look there instead of in the store's schema.
        """
        names = self.names()
        row = conn.execute(
            "SELECT (SELECT coalesce(array_agg(c.relname), '{}') FROM pg_class AS c"
            "   JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s"
            "   AND c.relkind IN ('r', 'p') AND c.relname = ANY(%s)),"
            " (SELECT count(*) FROM pg_proc AS p"
            "   JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = %s"
            "   AND p.proname = %s AND oidvectortypes(p.proargtypes) = %s)",
            (
                schema or self.schema,
                [names[k] for k in self.tables],
                schema or self.schema,
                names["charge"],
                self.spec.charge_args,
            ),
        ).fetchone()
        found = set(row[0]) if row is not None else set()
        present = {k for k in self.tables if names[k] in found}
        if (
            schema not in (None, self.schema)
            or present != set(self.tables)
            or not row
            or not row[1]
        ):
            return present, False
        version = conn.execute(self.sql("SELECT value FROM {meta} WHERE key = 'schema'")).fetchone()
        return present, version is not None and version[0] >= SCHEMA_VERSION

    def _located(
        self, conn: psycopg.Connection[Any], dsn_schema: str | None
    ) -> tuple[set[str], bool, str | None]:
        """(tables present, current, earlier location), the store's schema looked at first.

        When it holds none of the store's tables, an earlier version's store in
        the DSN's own schema (``dsn_schema``) is reported, with its location.
        """
        present, current = self.state(conn)
        if present or dsn_schema in (None, self.schema):
            return present, current, None
        found, _ = self.state(conn, dsn_schema)
        return (found, False, dsn_schema) if found else (present, current, None)

    def _check_present(self, label: str, present: set[str]) -> bool:
        """True when the store exists (maybe outdated); raises when it is partly missing."""
        core = set(self.tables) - {"store", *self.spec.added}  # tables an older store lacks
        if not present & core:
            return False
        missing = sorted(self.names()[k] for k in core - present)
        if missing:
            raise incomplete(label, missing)
        return True

    # -- opening, creation, migration --------------------------------------------

    def open(
        self,
        store: PostgresStore,
        *,
        create: bool,
        name: str | None,
        settings: list[tuple[str, tuple[Any, ...]]],
        grant_to: str | None = None,
    ) -> str:
        """Open the store (creating or migrating it with ``create``); return its recorded name.

        ``settings``: statements (with parameters) that write the store's
        settings rows when it is created. ``grant_to``: also grant that role
        the runtime rights (needs ``create``).
        """
        role = None if grant_to is None else check_role(grant_to)

        def inspect(conn: psycopg.Connection[Any]) -> tuple[set[str], bool, str | None]:
            # before any table is read; ``create`` is the owner's step: the schema must be its
            check_schema(conn, self.schema, store.label, creating=create)
            return self._located(conn, store.dsn_schema)

        present, current, legacy = store.run(inspect)
        if "store" in present and legacy is None:  # another kind of store here: say so first
            store.run(lambda conn: self._identity(conn, store.label, None))
        exists = self._check_present(store.label, present)
        location = store.run(self._location)
        if create and not exists:  # a store this host recorded is never made again
            try:
                registry.check_postgres_create(self.spec.kind, location)
            except LedgerUnavailable:
                if not self._check_present(store.label, store.run(inspect)[0]):
                    raise  # (not made meanwhile by another session)
        if not current or role is not None:
            if not create:
                state = "outdated" if exists else "absent"
                raise LedgerUnavailable(
                    f"the {store.label} is {state}: {INIT_HINT}, or pass create=True as its owner"
                )
            store.run(lambda conn: self._create(conn, store, name, settings, role))
        found: str = store.run(lambda conn: self._identity(conn, store.label, name))
        registry.bind_postgres(self.spec.kind, location, self._created, owner=create)
        return found

    def _location(self, conn: psycopg.Connection[Any]) -> str:
        """The store's location in the host's registry (server, database, schema, table)."""
        info = conn.info
        return registry.postgres_location(
            info.host, str(info.port), info.dbname, self.schema, self.table
        )

    def _identity(self, conn: psycopg.Connection[Any], label: str, name: str | None) -> str:
        row = conn.execute(
            self.sql("SELECT kind, name, created FROM {store} WHERE id = 1")
        ).fetchone()
        if row is None:
            raise LedgerUnavailable(f"the {label} records no identity: {INIT_HINT}")
        self._created = float(row[2])
        if row[0] != self.spec.kind:
            raise LedgerUnavailable(f"the {label} is a {row[0]}, not a {self.spec.kind}")
        if name is not None and row[1] != name:
            raise LedgerUnavailable(
                f"the {label} is named {row[1]!r}, not {name!r}: it is another store (check the "
                "DSN, the table and the name)"
            )
        return str(row[1])

    def _create(
        self,
        conn: psycopg.Connection[Any],
        store: PostgresStore,
        name: str | None,
        settings: list[tuple[str, tuple[Any, ...]]],
        role: str | None,
    ) -> None:
        """Create, migrate and grant under a session lock taken before the transaction.

        The schema is checked (:func:`check_schema`, as its owner) before
        anything is written and again after, inside the same transaction.
        """
        label, lock = store.label, _LOCK_TAG + self.schema + "." + self.table
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock,))
        try:
            with conn.transaction():
                if role is not None:
                    self._check_grantee(conn, role)
                ensure_schema(conn, self.schema, label)
                check_schema(conn, self.schema, label, creating=True)
                present, current, legacy = self._located(conn, store.dsn_schema)
                exists = self._check_present(label, present)
                if not current:
                    if legacy is not None:
                        self._move(conn, legacy, present, label)
                    self._build(conn, exists, name, settings)
                if role is not None:
                    self._grant(conn, role)
                check_schema(conn, self.schema, label, creating=True)
        finally:
            with contextlib.suppress(Exception):  # a lost session has released it already
                conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))

    def _move(
        self, conn: psycopg.Connection[Any], legacy: str, present: set[str], label: str
    ) -> None:
        """Move an earlier version's tables from ``legacy`` into the store's schema.

        Only tables the current user owns move (another owner: refused, named);
        the old functions are dropped (:meth:`_build` makes the new ones).
        """
        sql = psycopg_module().sql
        names = self.names()
        for suffix in sorted(present):
            row = conn.execute(
                "SELECT pg_get_userbyid(c.relowner), c.relowner = (SELECT r.oid FROM pg_roles AS r"
                "   WHERE r.rolname = current_user)"
                " FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = %s",
                (legacy, names[suffix]),
            ).fetchone()
            if row is None or not row[1]:
                table = f"table {legacy}.{names[suffix]} (an earlier version's store)"
                who = f"role {'?' if row is None else row[0]!r}"
                raise not_safe(label, owned_by_another(table, who, "the role running this step"))
            conn.execute(
                sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                    sql.Identifier(legacy, names[suffix]), sql.Identifier(self.schema)
                )
            )
        for (old,) in conn.execute(  # the old charge and trigger functions that are ours
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname IN (%s, %s)"
            " AND p.proowner = (SELECT r.oid FROM pg_roles AS r WHERE r.rolname = current_user)",
            (legacy, names["charge"], names["fn"]),
        ).fetchall():
            conn.execute(f"DROP FUNCTION {old} CASCADE")  # its triggers: _build remakes them

    def _build(
        self,
        conn: psycopg.Connection[Any],
        exists: bool,
        name: str | None,
        settings: list[tuple[str, tuple[Any, ...]]],
    ) -> None:
        for suffix, body in self.tables.items():
            conn.execute(self.sql(f"CREATE TABLE IF NOT EXISTS {{{suffix}}} ({body})"))
        conn.execute(  # a row of a prunable log goes only when stamped before the watermark
            self.sql(
                "CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql"
                " SET search_path = pg_catalog, pg_temp AS $$BEGIN"
                " IF TG_OP = 'DELETE' AND TG_NARGS > 0 THEN"
                f"  IF OLD.at < ({_WATERMARK})::float8 THEN RETURN OLD; END IF;"
                " END IF;"
                " RAISE EXCEPTION 'the audit log is append-only'; END$$"
            )
        )
        grantees: list[str] = []
        if exists:
            for stmt in self.spec.migrate:
                conn.execute(self.sql(stmt))
            grantees = [  # serving roles keep their rights across a migration
                r
                for (r,) in conn.execute(
                    "SELECT DISTINCT a.grantee::regrole::text FROM pg_class AS c,"
                    " aclexplode(c.relacl) AS a WHERE c.oid = to_regclass(%s)"
                    " AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)",
                    (f'"{self.schema}"."{self.names()["meta"]}"',),
                ).fetchall()
                if _ROLE.fullmatch(r)
            ]
        else:
            for stmt, params in settings:
                conn.execute(self.sql(stmt), params)
        conn.execute(
            self.sql(
                "INSERT INTO {store} VALUES (1, %s, %s, extract(epoch FROM clock_timestamp()))"
                " ON CONFLICT (id) DO NOTHING"
            ),
            (self.spec.kind, name or self.table),
        )
        for stmt in self.spec.extra:
            conn.execute(self.sql(stmt))
        for (old,) in conn.execute(  # every other overload, e.g. version 2's (it took a budget)
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = %s"
            " AND p.proname = %s AND oidvectortypes(p.proargtypes) <> %s",
            (self.schema, self.names()["charge"], self.spec.charge_args),
        ).fetchall():
            conn.execute(f"DROP FUNCTION {old}")
        conn.execute(self.sql(self.spec.charge_sql))
        for fn in (f"{{charge}}({self.spec.charge_args})", "{fn}()"):
            conn.execute(self.sql(f"REVOKE ALL ON FUNCTION {fn} FROM PUBLIC"))
        for role in grantees:
            self._grant(conn, role)
        conn.execute(
            self.sql(
                "INSERT INTO {meta}(key, value) VALUES ('schema', %s), ('refusals', 0),"
                " ('watermark', 0)"
                " ON CONFLICT (key) DO UPDATE SET value = greatest({meta}.value, EXCLUDED.value)"
            ),
            (SCHEMA_VERSION,),
        )

    # -- least privilege ---------------------------------------------------------

    def _check_grantee(self, conn: psycopg.Connection[Any], role: str) -> None:
        row = conn.execute(
            "SELECT r.rolsuper, r.rolname = current_user,"
            " pg_has_role(r.rolname, current_user, 'MEMBER'),"
            " r.oid = (SELECT n.nspowner FROM pg_namespace AS n WHERE n.nspname = %s)"
            " FROM pg_roles AS r WHERE r.rolname = %s",
            (self.schema, role),
        ).fetchone()
        if row is None:
            raise ValueError(
                f"grant_to: no role {role!r} exists on this server; create it first "
                "(nothing was created)"
            )
        superuser, owner, member, schema_owner = row
        why = (
            "a superuser (grants do not bind it)"
            if superuser
            else "the schema owner itself"
            if owner
            else "a member of the owner (it inherits the owner's rights)"
            if member
            else "the owner of the schema (it can drop the tables)"
            if schema_owner
            else ""
        )
        if why:
            raise ValueError(
                f"grant_to must be a least-privilege serving role, but {role!r} is {why} "
                "(nothing was created)"
            )

    def _grant(self, conn: psycopg.Connection[Any], role: str) -> None:
        """Give ``role`` exactly the runtime rights: read the tables, call the charge."""
        sql = psycopg_module().sql
        who = sql.Identifier(role)
        schema = sql.Identifier(self.schema)
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, who))
        for k in self.tables:
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(self.sql(f"{{{k}}}"), who))
        conn.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION {}({}) TO {}").format(
                self.sql("{charge}"), sql.SQL(self.spec.charge_args), who
            )
        )

    # -- charging and teardown ---------------------------------------------------

    def call_charge(
        self, conn: psycopg.Connection[Any], values: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """``SELECT * FROM schema.charge(values)``: the one atomic charge, every argument
        cast to the function's own type (reused id: ``reused_id()``; arguments the
        function refuses, e.g. repeated units: ``ValueError`` with its fixed message)."""
        pg = psycopg_module()
        try:
            if self._call_bytes is None:  # rendered once: a charge runs it every time
                self._call_bytes = self.sql(self._call).as_bytes(conn)
            row = conn.execute(self._call_bytes, values).fetchone()
        except pg.Error as exc:
            state = getattr(exc, "sqlstate", None)
            if state == "DPREU":
                raise reused_id() from None
            if state == "DPBAD":
                raise ValueError(f"the charge was refused: {exc.diag.message_primary}") from None
            raise
        return None if row is None else tuple(row)

    @property
    def _call(self) -> str:
        """The charge call's text: ``SELECT * FROM {charge}(%s::pg_catalog.text, ...)``.

        >>> spec = PostgresSpec("corpus budget", {}, (), "", "text, bigint, bigint")
        >>> PostgresSchema("c", spec)._call
        'SELECT * FROM {charge}(%s::pg_catalog.text, %s::pg_catalog.int8, %s::pg_catalog.int8)'
        """
        casts = (
            "%s::pg_catalog." + _CATALOG_TYPES.get(t.strip(), t.strip())
            for t in self.spec.charge_args.split(",")
        )
        return f"SELECT * FROM {{charge}}({', '.join(casts)})"

    def prune(self, store: PostgresStore, before: float, logs: tuple[str, ...]) -> int:
        """Delete the rows of the ``logs`` tables stamped before ``before`` (the new
        watermark), keeping their ids' digests in ``{pruned}``, in one transaction; the
        number of ids pruned (:mod:`~dprag_core.accounting.stores.retention`)."""
        ids = " UNION ".join(f"SELECT query_id FROM {{{t}}} WHERE at < w.cut" for t in logs)

        def work(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                row = conn.execute(
                    self.sql("SELECT value FROM {meta} WHERE key = 'watermark' FOR UPDATE")
                ).fetchone()
                if row is None:
                    raise LedgerUnavailable(f"the {store.label} is outdated: {INIT_HINT}")
                watermark = check_watermark(before, recorded_us=int(row[0]))
                conn.execute(
                    self.sql("UPDATE {meta} SET value = %s WHERE key = 'watermark'"), (watermark,)
                )
                cut = f"(SELECT ({_WATERMARK})::float8 AS cut) AS w"
                found = conn.execute(
                    self.sql(
                        f"WITH ids AS (SELECT DISTINCT i.query_id FROM {cut},"
                        f" LATERAL ({ids}) AS i), kept AS (INSERT INTO {{pruned}}(digest)"
                        f" SELECT DISTINCT {digest_sql('ids.query_id')} FROM ids"
                        " ON CONFLICT (digest) DO NOTHING) SELECT count(*) FROM ids"
                    )
                ).fetchone()
                for t in logs:  # the triggers let exactly these rows go
                    conn.execute(self.sql(f"DELETE FROM {{{t}}} WHERE at < ({_WATERMARK})::float8"))
            return 0 if found is None else int(found[0])

        return store.run(work)

    def drop(self, store: PostgresStore) -> None:
        """Drop every table and function of this store (tests and teardown only)."""

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                for k in self.tables:
                    conn.execute(self.sql(f"DROP TABLE IF EXISTS {{{k}}} CASCADE"))
                conn.execute(self.sql("DROP FUNCTION IF EXISTS {fn} CASCADE"))
                conn.execute(
                    self.sql(f"DROP FUNCTION IF EXISTS {{charge}}({self.spec.charge_args})")
                )

        store.run(work)


class PostgresBacked:
    """What a PostgreSQL budget (corpus budget, per-unit ledger) shares: the owner's
    schema step, ``drop`` and ``close`` over its ``_schema`` and ``_store``.

    >>> from dprag_core.accounting import PostgresCorpusAccountant
    >>> from dprag_core.accounting.ledger import PostgresLedger
    >>> [issubclass(c, PostgresBacked) for c in (PostgresLedger, PostgresCorpusAccountant)]
    [True, True]
    """

    _schema: PostgresSchema
    _store: PostgresStore

    @classmethod
    def create_schema(cls, dsn: str, **options: Any) -> None:
        """Create or migrate the schema (as its owner) and grant ``grant_to`` runtime rights.

        ``options`` are the constructor's; creating needs the budget (``total`` or
        ``budget_per_unit``).

        >>> from dprag_core.accounting.ledger import PostgresLedger
        >>> PostgresLedger.create_schema("postgresql://owner@db/app", budget_per_unit=5.0,
        ...                              grant_to="dprag_app")  # doctest: +SKIP
        """
        constructor: Any = cls
        constructor(dsn, create=True, **options).close()

    _logs: tuple[str, ...] = ()
    """The tables that record query ids (``prune`` deletes their old rows)."""

    def prune(self, *, before: float) -> int:
        """Delete the rows stamped before ``before`` (UNIX seconds, the new public
        watermark) from the tables that record query ids, keeping the ids' digests: a
        pruned id stays refused. Totals are unchanged. The owner's step (a serving role
        cannot delete). Returns the number of query ids pruned
        (:mod:`~dprag_core.accounting.stores.retention`).

        >>> from dprag_core.accounting.ledger import PostgresLedger
        >>> PostgresLedger("postgresql://owner@db/app").prune(before=1.8e9)  # doctest: +SKIP
        12
        """
        return self._schema.prune(self._store, before, self._logs)

    def drop(self) -> None:
        """Delete this store's tables (tests and teardown only: what they held is lost)."""
        self._schema.drop(self._store)

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()


def open_postgres(
    dsn: str,
    spec: PostgresSpec,
    *,
    table: str,
    name: object,
    create: object,
    needs: str | None,
    timeouts: PostgresTimeouts | None,
    grant_to: str | None,
    settings: list[tuple[str, tuple[Any, ...]]],
    schema: str = DEFAULT_SCHEMA,
) -> tuple[PostgresSchema, PostgresStore, str]:
    """A PostgreSQL budget's constructor, once: options checked, the schema opened.

    ``needs``: the parameter creating requires and the caller left out;
    ``settings``: the rows written when the store is created; ``schema``:
    the PostgreSQL schema the store lives in. Returns the store's layout
    (:class:`PostgresSchema`), the store and the store's recorded name.

    >>> from dprag_core.accounting.ledger import PostgresLedger  # its constructor calls it
    >>> PostgresLedger("postgresql://app@db/app")  # doctest: +SKIP
    """
    checked, create, _ = open_options(name=name, create=create, needs=needs)
    if grant_to is not None and not create:
        raise ValueError("grant_to needs create=True (granting is the schema owner's step)")
    layout = PostgresSchema(table, spec, schema)
    store = PostgresStore(dsn, timeouts, label=f"PostgreSQL {spec.kind} {table!r}")
    found = layout.open(store, create=create, name=checked, settings=settings, grant_to=grant_to)
    return layout, store, found
