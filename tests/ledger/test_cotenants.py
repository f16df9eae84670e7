"""Other database roles cannot make charges vanish, own a budget's tables or break status.

The server is set up as PostgreSQL 14 and earlier ship (and upgraded databases
keep): ``GRANT CREATE ON SCHEMA public TO PUBLIC``. Three login roles: the
owner (runs ``init``), the serving role (``grant_to``) and another tenant
("mallory"). Mallory plants better-matching overloads of the charge functions
(smallint, integer, numeric and text variants, in ``public`` and in a schema
of its own that the serving role's DSN searches first), pre-creates a store's
tables or its schema before ``init``, and, through a superuser, takes over or
gets rights on objects after it. Every charge dprag grants is recorded, every
takeover is refused naming the object and its owner, and the serving role's
``dprag ledger status`` shows its own stores among others'. Each test works in
a schema of its own (``schema=``).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ledger_support import POSTGRES_DSN, dsn_with, needs_postgres, needs_roles

from dprag_core.accounting import PostgresCorpusAccountant
from dprag_core.accounting.ledger import LedgerUnavailable, PostgresLedger
from dprag_core.accounting.stores.pgschema import SCHEMA_VERSION
from dprag_core.budget import Budget
from dprag_core.cli import main

pytestmark = [pytest.mark.postgres, needs_postgres, needs_roles]


@dataclass(frozen=True)
class Tenants:
    """Role names, a DSN for each (``superuser``: the test server's own) and a fresh schema."""

    owner: str
    app: str
    mallory: str
    schema: str

    def dsn(self, role: str | None, **options: str) -> str:
        opts = " ".join(f"-c {k}={v}" for k, v in options.items())
        return dsn_with(**({"user": role} if role else {}), **({"options": opts} if opts else {}))

    def sql(self, role: str | None, *statements: str, **options: str) -> list[Any]:
        """Run ``statements`` as ``role`` (None: the superuser); the last one's rows."""
        import psycopg

        rows: list[Any] = []
        with psycopg.connect(self.dsn(role, **options), autocommit=True) as conn:
            for statement in statements:
                cur = conn.execute(statement)
                rows = cur.fetchall() if cur.description else []
        return rows

    def corpus(self, role: str, table: str = "c", **kw: Any) -> PostgresCorpusAccountant:
        return PostgresCorpusAccountant(self.dsn(role), table=table, schema=self.schema, **kw)

    def ledger(self, role: str, table: str = "l", **kw: Any) -> PostgresLedger:
        return PostgresLedger(self.dsn(role), table=table, schema=self.schema, **kw)

    def init(self, table: str = "c", ledger: str = "l", schema: str | None = None) -> None:
        """The owner's step: a corpus budget and a ledger, granted to the serving role."""
        where = {"schema": schema or self.schema}
        PostgresCorpusAccountant(
            self.dsn(self.owner), total=Budget(10.0, 1e-6), table=table, create=True,
            grant_to=self.app, **where,
        ).close()  # fmt: skip
        PostgresLedger(
            self.dsn(self.owner), budget_per_unit=10.0, table=ledger, create=True,
            grant_to=self.app, **where,
        ).close()  # fmt: skip


@pytest.fixture(scope="module")
def public_create() -> Iterator[None]:
    """``CREATE ON SCHEMA public`` for every role (PostgreSQL <= 14), restored afterwards."""
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        had = conn.execute("SELECT has_schema_privilege('public', 'public', 'CREATE')").fetchone()
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    yield
    if had == (False,):
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")


@pytest.fixture
def tenants(public_create: None) -> Iterator[Tenants]:
    """Three fresh login roles and a schema name; the owner may create schemas."""
    tag = uuid.uuid4().hex[:8]
    t = Tenants(f"own_{tag}", f"app_{tag}", f"mal_{tag}", f"s_{tag}")
    database = t.sql(None, "SELECT current_database()")[0][0]
    t.sql(
        None,
        *(f"CREATE ROLE {r} LOGIN" for r in (t.owner, t.app, t.mallory)),
        f"GRANT CREATE ON DATABASE {database} TO {t.owner}",
    )
    yield t
    t.sql(
        None,
        f"DROP SCHEMA IF EXISTS {t.schema} CASCADE",
        f"DROP SCHEMA IF EXISTS m_{tag} CASCADE",
        f"REVOKE CREATE ON DATABASE {database} FROM {t.owner}, {t.mallory}",
        *(f"DROP OWNED BY {r} CASCADE" for r in (t.owner, t.app, t.mallory)),
        *(f"DROP ROLE {r}" for r in (t.owner, t.app, t.mallory)),
    )


CORPUS_VARIANTS = [
    f"text, {e}, {d}"
    for e, d in itertools.product(["smallint", "integer", "bigint", "numeric"], repeat=2)
] + ["text, text, text", "varchar, bigint, bigint"]
LEDGER_VARIANTS = [
    f"text, text[], {c}" for c in ("smallint", "integer", "bigint", "numeric", "text")
] + ["text, text, bigint", "varchar, varchar[], bigint"]


def _plant(t: Tenants, where: str) -> list[str]:
    """Mallory's look-alike charge functions in schema ``where``: each logs its call to
    ``{where}.calls`` and reports a charge it never recorded. Returns the statements."""
    statements = [
        f"CREATE TABLE IF NOT EXISTS {where}.calls (fn text)",
        f"GRANT USAGE ON SCHEMA {where} TO PUBLIC",
    ]
    for name, variants, returns, result in (
        ("c_charge", CORPUS_VARIANTS, "text", "'charged'"),
        ("l_charge", LEDGER_VARIANTS, "TABLE (outcome text, lacking text[])",
         "'charged', '{}'::text[]"),
    ):  # fmt: skip
        for args in variants:
            statements.append(
                f"CREATE FUNCTION {where}.{name}({args}) RETURNS {returns} LANGUAGE sql"
                f" SECURITY DEFINER AS $$ INSERT INTO {where}.calls VALUES ('{name}({args})');"
                f" SELECT {result} $$"
            )
    return statements


def _calls(t: Tenants, *schemas: str) -> int:
    return sum(int(t.sql(None, f"SELECT count(*) FROM {s}.calls")[0][0]) for s in schemas)


def test_planted_overloads_never_take_a_charge(tenants: Tenants) -> None:
    import psycopg

    t = tenants
    own = f"m_{t.schema[2:]}"
    t.init()
    t.sql(t.mallory, *_plant(t, "public"))
    t.sql(None, f"CREATE SCHEMA {own} AUTHORIZATION {t.mallory}")
    t.sql(t.mallory, *_plant(t, own))
    searched = {"search_path": f"{own},{t.schema},public"}  # the serving DSN searches them
    # the positive control: the call dprag made before (no schema, untyped arguments: a 0
    # arrives as smallint) runs a planted overload, and the "charge" is recorded nowhere
    with psycopg.connect(t.dsn(t.app, **searched), autocommit=True) as conn:
        row = conn.execute("SELECT * FROM c_charge(%s, %s, %s)", ("ctl", 5 * 10**11, 0))
        assert row.fetchone() == ("charged",)
    assert _calls(t, own, "public") == 1
    acc = PostgresCorpusAccountant(t.dsn(t.app, **searched), table="c", schema=t.schema)
    led = PostgresLedger(t.dsn(t.app, **searched), table="l", schema=t.schema)
    # int2, int4 and int8 costs; delta 0 (int2) each time
    costs = [Budget(1e-12), Budget(1e-7), Budget(0.5, 1e-9)]
    assert [acc.charge(c, query_id=f"q{i}") for i, c in enumerate(costs)] == [True] * 3
    assert led.charge("q0", ["a", "b"], 1e-12).granted and led.charge("q1", ["a"], 0.5).granted
    assert _calls(t, own, "public") == 1  # only the control reached mallory's functions
    assert [r.query_id for r in acc.history()] == ["q0", "q1", "q2"]  # 0 vanished charges
    assert acc.spent_epsilon == pytest.approx(0.5 + 1e-7 + 1e-12, abs=1e-15)
    assert sorted((e.query_id, e.unit) for e in led.audit_log()) == [
        ("q0", "a"), ("q0", "b"), ("q1", "a"),
    ]  # fmt: skip
    assert led.remaining(["a", "b"]) == {"a": 10.0 - 0.5 - 1e-12, "b": 10.0 - 1e-12}


def test_the_serving_roles_call_shape_cannot_reach_a_planted_function(tenants: Tenants) -> None:
    """What dprag sends: the schema-qualified name, every argument cast to its type."""
    t = tenants
    t.init()
    t.sql(t.mallory, *_plant(t, "public"))
    led = t.ledger(t.app)
    statement = led._schema.sql(led._schema._call).as_string(None)
    assert statement.startswith(f'SELECT * FROM "{t.schema}"."l_charge"(%s::pg_catalog.text,')
    assert led.charge("q", ["a"], 1.0).granted and _calls(t, "public") == 0


def test_repeated_units_are_refused_by_the_function_itself(tenants: Tenants) -> None:
    """A direct call with one unit 100 times: refused, nothing debited, no audit row."""
    import psycopg

    t = tenants
    t.init()
    with pytest.raises(psycopg.Error, match="distinct units"):
        t.sql(
            t.app,
            f"SELECT * FROM {t.schema}.l_charge('q', array_fill('a'::text, ARRAY[100]),"
            " 10000000000::bigint)",
        )
    led = t.ledger(t.app)
    assert list(led.audit_log()) == [] and led.status().total_spent == 0.0
    assert led.charge("q2", ["a", "a", "b"], 0.01).granted  # the API de-duplicates
    assert led.status().total_spent == pytest.approx(0.02)
    assert len(list(led.audit_log())) == 2


@dataclass(frozen=True)
class Planted:
    """One way another role gets hold of a store's schema before or after ``init``."""

    name: str
    before_init: bool
    statements: Callable[[Tenants], list[tuple[str | None, str]]]  # (as role, statement)
    names: str  # a regex the refusal matches: the object and the role


TAKEOVERS = [
    Planted(
        "mallory-created-the-schema",
        True,
        lambda t: [
            (None, f"GRANT CREATE ON DATABASE {_db(t)} TO {t.mallory}"),
            (t.mallory, f"CREATE SCHEMA {t.schema}"),
            (t.mallory, f"CREATE TABLE {t.schema}.c_budget (id integer)"),
        ],
        r"schema {schema} is owned by role '{mallory}'",
    ),
    Planted(
        "schema-open-to-public",
        True,
        lambda t: [
            (t.owner, f"CREATE SCHEMA {t.schema}"),
            (t.owner, f"GRANT CREATE, USAGE ON SCHEMA {t.schema} TO PUBLIC"),
        ],
        r"schema {schema} lets PUBLIC \(every role\) create objects in it.*"
        r"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC",
    ),
    Planted(
        "tables-pre-created-while-the-schema-was-open",
        True,
        lambda t: [
            (t.owner, f"CREATE SCHEMA {t.schema}"),
            (t.owner, f"GRANT CREATE, USAGE ON SCHEMA {t.schema} TO {t.mallory}"),
            *[
                (t.mallory, f"CREATE TABLE {t.schema}.c_{suffix} ({body})")
                for suffix, body in _CORPUS_TABLES.items()
            ],
            (t.owner, f"REVOKE CREATE ON SCHEMA {t.schema} FROM {t.mallory}"),
        ],
        r"table {schema}\.c_\w+ is owned by role '{mallory}'",
    ),
    Planted(
        "table-owner-altered",
        False,
        lambda t: [(None, f"ALTER TABLE {t.schema}.c_budget OWNER TO {t.mallory}")],
        r"table {schema}\.c_budget is owned by role '{mallory}'",
    ),
    Planted(
        "function-owner-altered",
        False,
        lambda t: [
            (None, f"ALTER FUNCTION {t.schema}.l_charge(text, text[], bigint) OWNER TO {t.mallory}")
        ],
        r"function {schema}\.l_charge\(text,text\[\],bigint\) is owned by role '{mallory}'",
    ),
    Planted(
        "sequence-planted",
        False,
        lambda t: [
            (None, f"CREATE SEQUENCE {t.schema}.l_audit_seq2"),
            (None, f"ALTER SEQUENCE {t.schema}.l_audit_seq2 OWNER TO {t.mallory}"),
        ],
        r"sequence {schema}\.l_audit_seq2 is owned by role '{mallory}'",
    ),
    Planted(
        "write-right-granted",
        False,
        lambda t: [(None, f"GRANT UPDATE ON {t.schema}.l_units TO {t.mallory}")],
        r"role '{mallory}' holds UPDATE on {schema}\.l_units",
    ),
    Planted(
        "create-granted-after-init",
        False,
        lambda t: [(None, f"GRANT CREATE ON SCHEMA {t.schema} TO {t.mallory}")],
        r"lets role '{mallory}' create objects",
    ),
    Planted(
        "trigger-with-a-foreign-function",
        False,
        lambda t: [
            (
                t.mallory,
                "CREATE FUNCTION public.reset() RETURNS trigger LANGUAGE plpgsql AS"
                " $$BEGIN RETURN NEW; END$$",
            ),
            (
                None,
                f"CREATE TRIGGER t BEFORE INSERT ON {t.schema}.c_charges"
                " FOR EACH ROW EXECUTE FUNCTION public.reset()",
            ),
        ],
        r"trigger t on {schema}\.c_charges runs function public\.reset\(\), owned by "
        r"role '{mallory}'",
    ),
]

_CORPUS_TABLES = {
    "meta": "key text PRIMARY KEY, value bigint NOT NULL",
    "store": "id integer PRIMARY KEY, kind text NOT NULL, name text NOT NULL,"
    " created double precision NOT NULL",
    "budget": "id integer PRIMARY KEY, total_epsilon bigint NOT NULL, total_delta bigint NOT NULL,"
    " spent_epsilon bigint NOT NULL, spent_delta bigint NOT NULL, queries bigint NOT NULL,"
    " refusals bigint NOT NULL DEFAULT 0",
    "charges": "query_id text PRIMARY KEY, epsilon bigint NOT NULL, delta bigint NOT NULL,"
    " at double precision NOT NULL",
}


def _db(t: Tenants) -> str:
    return str(t.sql(None, "SELECT current_database()")[0][0])


@pytest.mark.parametrize("planted", TAKEOVERS, ids=[p.name for p in TAKEOVERS])
def test_a_store_another_role_got_hold_of_is_refused_naming_it(
    tenants: Tenants, planted: Planted
) -> None:
    t = tenants
    names = planted.names.format(schema=t.schema, mallory=t.mallory)
    if not planted.before_init:
        t.init()
        assert t.corpus(t.app).queries == 0  # the positive control: it opens before
    for role, statement in planted.statements(t):
        t.sql(role, statement)
    with pytest.raises(LedgerUnavailable, match=f"not safe to use: .*{names}"):
        t.init()  # the owner's step refuses it (and creates nothing)
    if planted.before_init:  # init created nothing
        charge = f"{t.schema}.c_charge(text, bigint, bigint)"
        assert t.sql(None, f"SELECT to_regprocedure('{charge}')") == [(None,)]
        return
    for opening in (lambda: t.corpus(t.app), lambda: t.ledger(t.app), lambda: t.corpus(t.owner)):
        with pytest.raises(LedgerUnavailable, match=f"not safe to use: .*{names}"):
            opening()  # every open checks, as every role


def test_tables_pre_created_in_public_by_the_serving_role_are_not_adopted(
    tenants: Tenants,
) -> None:
    """Issue 35's item 2: the serving role made the tables before ``init``. The owner's
    DSN searches ``public`` (where earlier versions kept stores): init refuses to adopt
    them, naming the table and its owner, and creates nothing."""
    t = tenants
    prefix = f"x{t.schema[2:]}"
    t.sql(
        t.app,
        *(f"CREATE TABLE public.{prefix}_{s} ({b})" for s, b in _CORPUS_TABLES.items()),
        f"INSERT INTO public.{prefix}_meta VALUES ('schema', 3)",
        f"INSERT INTO public.{prefix}_budget VALUES (1, 50000000000000, 0, 0, 0, 0, 0)",
    )
    try:
        with pytest.raises(
            LedgerUnavailable, match=rf"table public\.{prefix}_\w+ .*owned by role '{t.app}'"
        ):
            t.corpus(t.owner, table=prefix, total=Budget(50.0), create=True, grant_to=t.app)
        assert t.sql(None, f"SELECT to_regclass('{t.schema}.{prefix}_budget')") == [(None,)]
    finally:
        t.sql(None, *(f"DROP TABLE public.{prefix}_{s}" for s in _CORPUS_TABLES))


def test_a_schema_other_roles_can_create_in_is_refused(tenants: Tenants) -> None:
    """``public`` on this server (as on PostgreSQL <= 14): every role may create in it."""
    t = tenants
    with pytest.raises(LedgerUnavailable, match="schema public is owned by role 'pg_database"):
        PostgresCorpusAccountant(
            t.dsn(t.owner), total=Budget(1.0), table="c", create=True, schema="public"
        )
    with pytest.raises(LedgerUnavailable, match=r"schema public lets PUBLIC \(every role\)"):
        PostgresCorpusAccountant(t.dsn(t.app), table="c", schema="public")


def test_the_serving_roles_status_shows_its_stores_among_others(
    tenants: Tenants, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35's item 4: several stores in the schema, one of them not the serving role's."""
    t = tenants
    t.init()
    monkeypatch.setenv("DPRAG_LEDGER_DSN", t.dsn(t.owner))
    init = ["ledger", "init", "--schema", t.schema, "--table", "other", "--corpus-epsilon", "3"]
    assert main([*init, "--corpus-delta", "0"]) == 0  # a store not granted to the serving role
    assert "ready: corpus budget" in capsys.readouterr().out
    acc, led = t.corpus(t.app), t.ledger(t.app)
    assert acc.charge(Budget(0.25), query_id="q1")
    assert led.charge("q1", ["a", "b"], 0.5).granted
    monkeypatch.setenv("DPRAG_LEDGER_DSN", t.dsn(t.app))
    assert main(["ledger", "status", "--schema", t.schema, "--json"]) == 0
    views = {v["name"]: v for v in json.loads(capsys.readouterr().out)}
    assert sorted(views) == ["c", "l"]
    assert views["c"]["spent_epsilon"] == 0.25 and views["l"]["total_spent"] == 1.0
    with pytest.raises(SystemExit, match="no table 'other'"):  # not the serving role's
        main(["ledger", "status", "--schema", t.schema, "--table", "other"])
    monkeypatch.setenv("DPRAG_LEDGER_DSN", t.dsn(t.owner))
    assert main(["ledger", "status", "--schema", t.schema, "--json"]) == 0
    assert sorted(v["name"] for v in json.loads(capsys.readouterr().out)) == ["c", "l", "other"]


def test_an_earlier_versions_store_is_moved_into_the_schema_by_init(tenants: Tenants) -> None:
    """A version-3 store in the DSN's own schema: the serving role is told to run init; the
    owner's init moves it (its charges, the serving role's rights) and drops the old
    functions."""
    t = tenants
    old = f"o_{t.schema[2:]}"
    t.sql(None, f"CREATE SCHEMA {old} AUTHORIZATION {t.owner}")
    t.init(schema=old)
    assert PostgresCorpusAccountant(t.dsn(t.app), table="c", schema=old).charge(
        Budget(1.0), query_id="before"
    )
    t.sql(
        t.owner,
        f"UPDATE {old}.c_meta SET value = 3 WHERE key = 'schema'",
        f"UPDATE {old}.l_meta SET value = 3 WHERE key = 'schema'",
    )
    in_old = {"search_path": old}  # where version 3 found its stores: the DSN's schema
    with pytest.raises(LedgerUnavailable, match=r"outdated.*dprag ledger init"):
        PostgresCorpusAccountant(t.dsn(t.app, **in_old), table="c", schema=t.schema)
    owner = t.dsn(t.owner, **in_old)
    PostgresCorpusAccountant(
        owner, total=Budget(10.0, 1e-6), table="c", schema=t.schema, create=True
    ).close()
    PostgresLedger(owner, budget_per_unit=10.0, table="l", schema=t.schema, create=True).close()
    left = (
        f"SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = '{old}'::regnamespace),"
        f" (SELECT count(*) FROM pg_proc WHERE pronamespace = '{old}'::regnamespace)"
    )
    assert t.sql(None, left) == [(0, 0)]  # every table moved, the old functions dropped
    acc = t.corpus(t.app)
    assert [r.query_id for r in acc.history()] == ["before"] and acc.spent_epsilon == 1.0
    assert (
        acc.charge(Budget(0.5), query_id="after")
        and t.ledger(t.app).charge("after", ["a"], 1.0).granted
    )
    assert t.sql(t.owner, f"SELECT value FROM {t.schema}.c_meta WHERE key = 'schema'") == [
        (SCHEMA_VERSION,)
    ]
