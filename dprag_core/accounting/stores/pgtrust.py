"""Co-tenant checks of a PostgreSQL store's schema: only its owner creates, owns or writes.

A store's tables and functions live in a schema of their own (``schema=``,
default ``dprag``). Whoever can create objects in that schema, own one of
its objects or write one of its tables can plant a look-alike function, keep
a table it pre-created, or reset what was spent. So, when a store is created
or migrated (:func:`check_schema` with ``creating=True``, the owner's step)
and every time one is opened:

* the schema must not let any role but its owner create objects in it (no
  ``CREATE`` for ``PUBLIC`` or any other role);
* every relation (table, index, sequence), function and type in it must be
  owned by the schema's owner, and every trigger on its tables must run a
  function the schema's owner owns;
* no role but a table's owner may hold any right on it beyond ``SELECT``
  (``USAGE`` on a sequence);
* when creating, the schema must be owned by the role running the step;
* **effective rights**: no role but the owner may hold a column-level right
  beyond ``SELECT`` on a store's table, ``EXECUTE`` on a function of the
  schema (``PUBLIC`` included) other than a store's charge function granted
  to that store's serving role (a role holding ``SELECT`` on its tables),
  membership in ``pg_write_all_data`` (PostgreSQL 14+) or in the owner's
  role, or, on PostgreSQL 15 and earlier, ``CREATEROLE`` (it can grant
  itself the owner role). Superusers act as the owner and are not refused.

A failed check raises :class:`LedgerUnavailable` naming the object and the
role at fault; nothing is charged or created. What no check can stop: a
superuser, and a member of the owner's role, act as the owner.

Sessions are hardened too
(:class:`~dprag_core.accounting.stores.postgres.PostgresStore`): every
connection sets ``search_path`` to ``pg_catalog, pg_temp`` and every store
object is named with its schema, so no name dprag's statements use can
resolve to another role's object.

>>> check_schema_name("dprag")
'dprag'
>>> check_schema_name("pg_dprag")
Traceback (most recent call last):
...
ValueError: schema must not start with 'pg_' (reserved by PostgreSQL), got 'pg_dprag'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dprag_core.accounting.stores.amounts import check_table
from dprag_core.accounting.stores.errors import LedgerUnavailable
from dprag_core.accounting.stores.postgres import psycopg_module

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "DEFAULT_SCHEMA",
    "check_schema",
    "check_schema_name",
    "ensure_schema",
    "not_safe",
    "owned_by_another",
]

DEFAULT_SCHEMA = "dprag"
"""The schema a PostgreSQL store lives in unless ``schema=`` names another."""

_LOCK_TAG = "dprag-namespace:"

# One statement, one snapshot: (rank, what, object, role oid) for every way another role
# could act on the schema's objects, the schema's own first, then tables. ``%(me)s``: when
# creating, the schema must be the caller's.
_PROBLEMS = """
WITH s AS (SELECT n.oid, n.nspname, n.nspowner, n.nspacl FROM pg_catalog.pg_namespace AS n
           WHERE n.nspname = %(schema)s)
SELECT 0, 'owner', 'schema ' || pg_catalog.quote_ident(s.nspname), s.nspowner FROM s
    WHERE %(me)s AND s.nspowner <> (SELECT r.oid FROM pg_catalog.pg_roles AS r
                                    WHERE r.rolname = pg_catalog.current_user())
UNION ALL
SELECT 1, 'create', 'schema ' || pg_catalog.quote_ident(s.nspname), a.grantee
    FROM s, pg_catalog.aclexplode(s.nspacl) AS a
    WHERE a.privilege_type = 'CREATE' AND a.grantee <> s.nspowner
UNION ALL
SELECT CASE WHEN c.relkind IN ('r', 'p') THEN 2 ELSE 3 END, 'owns',
       CASE c.relkind WHEN 'S' THEN 'sequence ' WHEN 'i' THEN 'index ' WHEN 'I' THEN 'index '
                      ELSE 'table ' END || c.oid::pg_catalog.regclass::text,
       c.relowner
    FROM s JOIN pg_catalog.pg_class AS c ON c.relnamespace = s.oid WHERE c.relowner <> s.nspowner
UNION ALL
SELECT 3, 'owns', 'function ' || p.oid::pg_catalog.regprocedure::text, p.proowner
    FROM s JOIN pg_catalog.pg_proc AS p ON p.pronamespace = s.oid WHERE p.proowner <> s.nspowner
UNION ALL
SELECT 4, 'owns', 'type ' || t.oid::pg_catalog.regtype::text, t.typowner
    FROM s JOIN pg_catalog.pg_type AS t ON t.typnamespace = s.oid WHERE t.typowner <> s.nspowner
UNION ALL
SELECT 5, 'holds ' || a.privilege_type || ' on', c.oid::pg_catalog.regclass::text, a.grantee
    FROM s JOIN pg_catalog.pg_class AS c ON c.relnamespace = s.oid,
         pg_catalog.aclexplode(c.relacl) AS a
    WHERE a.grantee <> c.relowner AND a.privilege_type NOT IN ('SELECT', 'USAGE')
UNION ALL
SELECT 6, 'trigger', pg_catalog.quote_ident(g.tgname) || ' on ' || c.oid::pg_catalog.regclass::text
       || ' runs function ' || p.oid::pg_catalog.regprocedure::text, p.proowner
    FROM s JOIN pg_catalog.pg_class AS c ON c.relnamespace = s.oid
    JOIN pg_catalog.pg_trigger AS g ON g.tgrelid = c.oid
    JOIN pg_catalog.pg_proc AS p ON p.oid = g.tgfoid
    WHERE p.proowner <> s.nspowner
UNION ALL
SELECT 7, 'column ' || a.privilege_type, c.oid::pg_catalog.regclass::text || ' ('
       || pg_catalog.quote_ident(t.attname) || ')', a.grantee
    FROM s JOIN pg_catalog.pg_class AS c ON c.relnamespace = s.oid
    JOIN pg_catalog.pg_attribute AS t
        ON t.attrelid = c.oid AND t.attnum > 0 AND t.attacl IS NOT NULL,
         pg_catalog.aclexplode(t.attacl) AS a
    WHERE a.grantee <> c.relowner AND a.privilege_type <> 'SELECT'
UNION ALL
SELECT 8, 'execute', p.oid::pg_catalog.regprocedure::text, a.grantee
    FROM s JOIN pg_catalog.pg_proc AS p ON p.pronamespace = s.oid,
         pg_catalog.aclexplode(COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) AS a
    WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
      -- creating (the owner's init): PUBLIC's default EXECUTE on an earlier version's
      -- functions is what the migration revokes, and its old overloads it drops
      AND NOT (%(me)s AND a.grantee = 0)
      AND (a.grantee = 0 OR p.proname !~ '_charge$' OR NOT EXISTS (
          SELECT FROM pg_catalog.pg_class AS m, pg_catalog.aclexplode(m.relacl) AS b
          WHERE m.relnamespace = s.oid AND b.grantee = a.grantee AND b.privilege_type = 'SELECT'
            AND m.relname = pg_catalog.regexp_replace(p.proname, '_charge$', '_meta')))
UNION ALL
SELECT 9, 'write all', 'schema ' || pg_catalog.quote_ident(s.nspname), r.oid
    FROM s, pg_catalog.pg_roles AS r
    WHERE pg_catalog.to_regrole('pg_write_all_data') IS NOT NULL
      AND r.rolname !~ '^pg_' AND NOT r.rolsuper AND r.oid <> s.nspowner
      AND pg_catalog.pg_has_role(r.oid, pg_catalog.to_regrole('pg_write_all_data')::oid, 'MEMBER')
UNION ALL
SELECT 10, 'member', 'schema ' || pg_catalog.quote_ident(s.nspname), r.oid
    FROM s, pg_catalog.pg_roles AS r
    WHERE r.rolname !~ '^pg_' AND NOT r.rolsuper AND r.oid <> s.nspowner
      AND pg_catalog.pg_has_role(r.oid, s.nspowner, 'MEMBER')
UNION ALL
SELECT 11, 'createrole', 'schema ' || pg_catalog.quote_ident(s.nspname), r.oid
    FROM s, pg_catalog.pg_roles AS r
    WHERE pg_catalog.current_setting('server_version_num')::int < 160000
      AND r.rolcreaterole AND NOT r.rolsuper AND r.oid <> s.nspowner
ORDER BY 1, 3
"""


def check_schema_name(schema: object) -> str:
    """The ``schema`` parameter: a lowercase SQL identifier, not a ``pg_`` one."""
    name = check_table(schema, "schema")
    if name.startswith("pg_"):
        raise ValueError(f"schema must not start with 'pg_' (reserved by PostgreSQL), got {name!r}")
    return name


def ensure_schema(conn: psycopg.Connection[Any], schema: str, label: str) -> None:
    """Create ``schema`` (owned by the current user) unless it exists; inside a transaction.

    A transaction lock on the name serialises concurrent creators.
    """
    sql = psycopg_module().sql
    conn.execute(
        "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s))", (_LOCK_TAG + schema,)
    )
    row = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace AS n WHERE n.nspname = %s),"
        " pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')",
        (schema,),
    ).fetchone()
    if row is None or row[0]:
        return
    if not row[1]:
        raise LedgerUnavailable(
            f"the {label} needs the schema {schema!r}, which does not exist, and this role "
            f"may not create schemas: have an administrator run CREATE SCHEMA {schema} "
            "AUTHORIZATION <the owner role>, then run this step again as that role"
        )
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def check_schema(conn: psycopg.Connection[Any], schema: str, label: str, *, creating: bool) -> None:
    """Refuse a schema other roles can create in, own objects in or write (see the module).

    Nothing to check when the schema does not exist. ``creating``: also
    refuse a schema the current user does not own.
    """
    rows = conn.execute(_PROBLEMS, {"schema": schema, "me": creating}).fetchall()
    if not rows:
        return
    names = _role_names(conn, {int(r[3]) for r in rows})
    owner_row = conn.execute(
        "SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace AS n"
        " WHERE n.nspname = %s",
        (schema,),
    ).fetchone()
    owner = "?" if owner_row is None else str(owner_row[0])
    _, what, obj, role = rows[0]
    who, grantee = names[int(role)]
    revoke = f"REVOKE CREATE ON SCHEMA {schema} FROM {grantee}"
    more = f" (and {len(rows) - 1} more such problems)" if len(rows) > 1 else ""
    raise not_safe(label, _why(str(what), str(obj), who, owner, revoke, grantee) + more)


def not_safe(label: str, why: str) -> LedgerUnavailable:
    """The refusal of a store another role could act on.

    >>> str(not_safe("PostgreSQL corpus budget 'c'", "why"))
    "the PostgreSQL corpus budget 'c' is not safe to use: why"
    """
    return LedgerUnavailable(f"the {label} is not safe to use: {why}")


def owned_by_another(obj: str, who: str, expected: str) -> str:
    """Why an object another role owns is refused.

    >>> owned_by_another("table s.c_budget", "role 'mallory'", "the schema's owner 'o'")[:47]
    "table s.c_budget is owned by role 'mallory', no"
    """
    return (
        f"{obj} is owned by {who}, not by {expected}: another role created it or took it "
        "over; check what it recorded and remove it (as a superuser)"
    )


def _why(what: str, obj: str, who: str, owner: str, revoke: str, grantee: str = "") -> str:
    """The sentence naming one problem ``check_schema`` found: the role, the right, the
    object and the fix."""
    if what == "owner":
        return (
            f"{obj} is owned by {who}, not by the role running this step: a schema's owner "
            "can replace a store's tables; run it as that owner, or use a schema of your own "
            "(schema=, --schema)"
        )
    if what == "create":
        return (
            f"{obj} lets {who} create objects in it, so another role could plant look-alike "
            f"tables or functions; as its owner, {revoke}"
        )
    if what == "owns":
        return owned_by_another(obj, who, f"the schema's owner {owner!r}")
    if what == "trigger":
        return f"trigger {obj}, owned by {who}, not by the schema's owner {owner!r}"
    if what.startswith("column "):
        right = what.split()[1]
        return (
            f"{who} holds {right} on column {obj}: it could rewrite what was spent; as the "
            f"table's owner, REVOKE {right} ({obj.rsplit('(', 1)[1]} ON {obj.split(' (')[0]} "
            f"FROM {grantee}"
        )
    if what == "execute":
        return (
            f"{who} may EXECUTE function {obj} without being a serving role of its store "
            f"(SELECT on its tables): it could spend this budget; REVOKE EXECUTE ON FUNCTION "
            f"{obj} FROM {grantee}"
        )
    if what == "write all":
        return (
            f"{who} is a member of pg_write_all_data, so it may write every table of {obj} "
            f"and rewrite what was spent; REVOKE pg_write_all_data FROM {grantee}"
        )
    if what == "member":
        return (
            f"{who} is a member of the schema's owner {owner!r}, so it may act as the owner on "
            f"{obj}; REVOKE {quoted(owner)} FROM {grantee}"
        )
    if what == "createrole":
        return (
            f"{who} has CREATEROLE, which on PostgreSQL 15 and earlier lets it grant itself "
            f"the owner role {owner!r} of {obj}; ALTER ROLE {grantee} NOCREATEROLE (or use "
            "PostgreSQL 16 or later)"
        )
    return (
        f"{who} {what} {obj}: only the schema's owner {owner!r} may write a store's "
        "tables; REVOKE that right"
    )


def _role_names(conn: psycopg.Connection[Any], oids: set[int]) -> dict[int, tuple[str, str]]:
    """Role oid -> (how a message names it, how SQL names it); 0 is PUBLIC."""
    names = {0: ("PUBLIC (every role)", "PUBLIC")}
    for oid, name in conn.execute(
        "SELECT r.oid, r.rolname FROM pg_catalog.pg_roles AS r WHERE r.oid = ANY(%s)",
        (sorted(oids - {0}),),
    ).fetchall():
        names[int(oid)] = (f"role {name!r}", quoted(name))
    return {oid: names.get(oid, (f"role oid {oid}", str(oid))) for oid in oids}


def quoted(name: str) -> str:
    """An identifier quoted for SQL shown to an operator (dprag never runs it).

    >>> quoted("app"), quoted('we"ird')
    ('"app"', '"we""ird"')
    """
    return '"' + name.replace('"', '""') + '"'
