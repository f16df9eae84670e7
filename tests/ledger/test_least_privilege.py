"""Least privilege that holds: the serving role can only charge non-negative costs.

The stores live in a schema of their own, created by the owner with
``grant_to=`` the serving role. Connected as that role, the test tries every
way to refund itself, raise a budget or write the tables: each function of the
schema (enumerated from ``pg_proc``) called with negative, NaN-like (NULL),
huge and hand-picked arguments, the previous version's overload that took a
unit's budget from the caller, and direct INSERT / UPDATE / DELETE /
TRUNCATE / ALTER / DROP. Every attempt is refused, and every row of every
table is the same afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ledger_support import POSTGRES_DSN, dsn_with, needs_postgres, needs_roles

from dprag_core.accounting import PostgresCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger
from dprag_core.budget import Budget

pytestmark = [pytest.mark.postgres, needs_postgres, needs_roles]

HUGE = 10**18 + 1  # one pico-epsilon unit above the largest cost a store accepts
# Arguments by the function's argument types: every one must be refused.
ATTACKS: dict[str, list[tuple[Any, ...]]] = {
    "text, bigint, bigint": [
        ("refund", -(10**12), 0),
        ("refund-delta", 0, -1),
        ("huge", HUGE, 0),
        ("huge-delta", 0, 2**62),
        ("null-cost", None, 0),
        (None, 10**11, 0),
    ],
    "text, text[], bigint": [
        ("refund", ["a"], -(10**12)),
        ("refund-x", ["x"], -(10**12)),
        ("huge", ["fresh"], HUGE),
        ("null-unit", ["a", None], 1),
        ("null-cost", ["a"], None),
        (None, ["a"], 1),
        ("claim-of-no-kind", [], 3),  # a claim is 0 (durable) or 1 (seen now); 2 settles
    ],
}


@pytest.fixture
def stores(runtime_role: str) -> Iterator[tuple[str, str, str]]:
    """(schema, owner DSN, serving DSN) with a corpus budget ``c`` and a ledger ``l``."""
    import psycopg

    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    owner = dsn_with(options=f"-c search_path={schema}")
    app = dsn_with(user=runtime_role, options=f"-c search_path={schema}")
    PostgresCorpusAccountant(
        owner, total=Budget(1.0, 1e-6), table="c", create=True, grant_to=runtime_role, schema=schema
    ).close()
    PostgresLedger(
        owner, budget_per_unit=1.0, table="l", create=True, grant_to=runtime_role, schema=schema
    ).close()
    yield schema, owner, app
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _snapshot(owner: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table in ``schema`` (as the owner)."""
    import psycopg

    with psycopg.connect(owner) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
            )
        ]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}


def test_the_serving_role_can_charge_but_never_refund_raise_or_write(
    stores: tuple[str, str, str],
) -> None:
    import psycopg

    schema, owner, app = stores
    acc = PostgresCorpusAccountant(app, table="c", schema=schema)  # the recorded total
    led = PostgresLedger(app, table="l", schema=schema)
    assert acc.charge(Budget(0.5, 1e-7), query_id="q1")
    assert led.charge("q1", ["a"], 0.5).granted and led.charge("q2", ["x"], 1.0).granted
    before = _snapshot(owner, schema)
    allowed: list[str] = []
    with psycopg.connect(app, autocommit=True) as conn:
        functions = conn.execute(
            "SELECT p.proname, oidvectortypes(p.proargtypes) FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
        assert len(functions) == 4  # two charge functions, two append-only trigger functions
        attempts: list[tuple[str, tuple[Any, ...]]] = []
        for name, types in functions:
            arity = 0 if not types else types.count(",") + 1
            for args in ATTACKS.get(types, [(None,) * arity]):
                placeholders = ", ".join(["%s"] * len(args))
                attempts.append((f"SELECT * FROM {schema}.{name}({placeholders})", args))
        # version 2's overload took the new units' budget (and the time) from the caller
        attempts.append((f"SELECT {schema}.l_charge('chosen', ARRAY['new'], 1, {10**18}, 0)", ()))
        attempts.append((f"SELECT {schema}.c_charge('old', 1, 0, 0.0)", ()))
        tables = sorted(before)
        assert len(tables) == 11  # meta, store, pruned per store; budget's two, ledger's three
        for t in tables:
            attempts += [
                (f"INSERT INTO {schema}.{t} SELECT * FROM {schema}.{t}", ()),
                (f"UPDATE {schema}.{t} SET {_first_column(conn, schema, t)} = NULL", ()),
                (f"DELETE FROM {schema}.{t}", ()),
                (f"TRUNCATE {schema}.{t}", ()),
                (f"ALTER TABLE {schema}.{t} DISABLE TRIGGER ALL", ()),
                (f"DROP TABLE {schema}.{t}", ()),
            ]
        attempts.append((f"CREATE TABLE {schema}.l_units_new (unit text)", ()))
        for sql, args in attempts:
            try:
                conn.execute(sql, args)
            except psycopg.Error:
                continue
            allowed.append(f"{sql} {args!r}")
    assert allowed == []
    assert _snapshot(owner, schema) == before  # nothing changed
    assert led.remaining(["x", "new"]) == {"x": 0.0, "new": 1.0}
    assert (acc.spent_epsilon, acc.queries) == (0.5, 1)
    assert acc.charge(Budget(0.25), query_id="q3")  # charging still works, and only spends
    assert acc.spent_epsilon == 0.75
    assert led.claim("q3", durable=False) and led.charge("q3", ["y"], 0.5).granted
    charged = _snapshot(owner, schema)
    assert led.claim("q4", durable=False)
    led.settle()  # the serving role's settle rewrites a counter row to its own value
    after = _snapshot(owner, schema)
    assert after["l_meta"] == charged["l_meta"] and after["l_units"] == charged["l_units"]
    assert len(after["l_queries"]) == len(charged["l_queries"]) + 1  # the claim of q4


def _first_column(conn: Any, schema: str, table: str) -> str:
    row = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = %s ORDER BY ordinal_position LIMIT 1",
        (schema, table),
    ).fetchone()
    return str(row[0])


@pytest.mark.parametrize("role", ["public", "pg_monitor", "no_such_role_x1", "dprag"])
def test_unsafe_or_missing_grantees_are_refused_before_anything_is_created(
    stores: tuple[str, str, str], role: str
) -> None:
    import psycopg

    schema, owner, _ = stores
    with pytest.raises(ValueError, match="grant_to") as info:
        PostgresLedger(
            owner, budget_per_unit=1.0, table="fresh", create=True, grant_to=role, schema=schema
        )
    assert "nothing was created" in str(info.value) or role in ("public", "pg_monitor")
    with psycopg.connect(owner) as conn:
        assert conn.execute("SELECT to_regclass('fresh_meta')").fetchone() == (None,)


@pytest.mark.server_wide_rights
def test_a_member_of_the_owner_is_refused(stores: tuple[str, str, str], runtime_role: str) -> None:
    import psycopg

    schema, owner, _ = stores
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f"GRANT {conn.info.user} TO {runtime_role}")
    # refused by the schema's check of effective rights (a member acts as the owner), before
    # --grant-to's own check of the grantee
    with pytest.raises(LedgerUnavailable, match=f"'{runtime_role}' is a member of the schema's"):
        PostgresCorpusAccountant(
            owner, total=Budget(1.0), table="fresh", create=True, grant_to=runtime_role,
            schema=schema,
        )  # fmt: skip


def test_migration_drops_the_old_overloads_and_keeps_the_serving_roles_rights(
    stores: tuple[str, str, str], runtime_role: str
) -> None:
    import psycopg

    schema, owner, app = stores
    with psycopg.connect(owner, autocommit=True) as conn:  # what version 2 left behind
        conn.execute(
            "CREATE FUNCTION l_charge(q text, us text[], c bigint, b bigint, at double precision)"
            " RETURNS text[] LANGUAGE sql SECURITY DEFINER AS $$ SELECT '{}'::text[] $$"
        )
        conn.execute(
            "GRANT EXECUTE ON FUNCTION l_charge(text, text[], bigint, bigint, double precision)"
            f" TO {runtime_role}"
        )
        conn.execute("UPDATE l_meta SET value = 2 WHERE key = 'schema'")
    # the serving role cannot migrate; the old overload, executable by PUBLIC (the default
    # of a function created without REVOKE), is refused first, naming the right and the fix
    with pytest.raises(LedgerUnavailable, match=r"PUBLIC \(every role\) may EXECUTE function"):
        PostgresLedger(app, table="l", schema=schema)
    PostgresLedger(owner, table="l", create=True, budget_per_unit=1.0, schema=schema).close()
    with psycopg.connect(owner) as conn:
        overloads = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'l_charge'"
            " AND pronamespace = to_regnamespace(%s)",
            (schema,),
        )
        assert overloads.fetchone() == (1,)
    assert PostgresLedger(app, table="l", schema=schema).charge("after", ["a"], 0.25).granted


# (grant made by the superuser, what the refusal says): rights no table ACL shows
EFFECTIVE_RIGHTS = {
    "pg_write_all_data": ("GRANT pg_write_all_data TO {role}", "member of pg_write_all_data"),
    "a column-level UPDATE": (
        "GRANT UPDATE (spent_epsilon) ON {schema}.c_budget TO {role}",
        r"holds UPDATE on column {schema}\.c_budget \(spent_epsilon\)",
    ),
    "CREATEROLE (PostgreSQL 15 and earlier)": (
        "ALTER ROLE {role} CREATEROLE",
        "has CREATEROLE",
    ),
    "EXECUTE on a charge function without being its serving role": (
        "GRANT EXECUTE ON FUNCTION {schema}.l_charge(text, text[], bigint) TO {role}",
        r"may EXECUTE function {schema}\.l_charge",
    ),
}


@pytest.mark.server_wide_rights
@pytest.mark.parametrize("right", sorted(EFFECTIVE_RIGHTS))
def test_effective_rights_of_any_other_role_are_refused_naming_it(
    right: str, stores: tuple[str, str, str]
) -> None:
    """A role other than the owner that could rewrite or spend the budget through a right
    no table ACL shows: every open (owner's init, serving role's open) is refused, naming
    the role, the right and the object; nothing is charged."""
    import psycopg

    schema, owner, app = stores
    grant, refusal = EFFECTIVE_RIGHTS[right]
    other = f"dprag_x_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
        if "CREATEROLE" in right and version >= 160000:
            pytest.skip("PostgreSQL 16 and later: CREATEROLE no longer takes over a role")
        if "pg_write_all_data" in right and version < 140000:
            pytest.skip("pg_write_all_data exists from PostgreSQL 14")
        conn.execute(f"CREATE ROLE {other} LOGIN")
        try:
            before = _snapshot(owner, schema)
            conn.execute(grant.format(role=other, schema=schema))
            pattern = f"role '{other}' .*" + refusal.format(schema=schema)
            for dsn, create in ((owner, True), (app, False)):
                with pytest.raises(LedgerUnavailable, match=pattern):
                    PostgresCorpusAccountant(
                        dsn, table="c", schema=schema, create=create,
                        total=Budget(1.0, 1e-6) if create else None,
                    ).charge(Budget(0.1), query_id="after-grant")  # fmt: skip
                with pytest.raises(LedgerUnavailable, match=pattern):
                    PostgresLedger(dsn, table="l", schema=schema).charge("after", ["a"], 0.1)
            assert _snapshot(owner, schema) == before
        finally:
            conn.execute(f"DROP OWNED BY {other}")
            conn.execute(f"DROP ROLE {other}")
