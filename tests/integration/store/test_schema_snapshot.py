"""src/tenure/_store/schema.sql says exactly what the migrations build.

schema.sql is for reading (nothing applies it in production), so nothing but this test
keeps it true. The test applies it to one fresh schema and the migrations to another,
describes both from the catalog — relations, columns, constraints, indexes, functions,
triggers, sequences, views, types, policies, comments and the rows a migration seeds —
and fails naming each object that differs. A new migration therefore fails here until
schema.sql says the same (and names that migration on its "As of migration" line).
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from tests.support.schemas import fresh_schema_dsn

import tenure._store
from tenure._store import MIGRATIONS_PACKAGE, migrate
from tenure._store._migrate import discover

SCHEMA_SQL = Path(tenure._store.__file__).with_name("schema.sql")
SCHEMA_PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "schema.md"
AS_OF = re.compile(r"^-- As of migration: (\d{4}_[a-z0-9_]+)$", re.MULTILINE)

Catalog = dict[str, str]

# Each query lists one kind of object of the current schema as (name, description) rows;
# every description is built by PostgreSQL's own deparsers, so two schemas compare equal
# exactly when the server sees the same objects.
CATALOG_QUERIES: dict[str, str] = {
    "relation": """
        SELECT c.relname,
               format('kind=%s persistence=%s rls=%s options=%s', c.relkind, c.relpersistence,
                      c.relrowsecurity, array_to_string(c.reloptions, ','))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema()
    """,
    # The position among the table's live columns, so the column order counts too.
    "column": """
        SELECT c.relname || '.' || a.attname,
               format('#%s %s %s default=%s identity=%s generated=%s collation=%s',
                      row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                      format_type(a.atttypid, a.atttypmod),
                      CASE WHEN a.attnotnull THEN 'NOT NULL' ELSE 'NULL' END,
                      pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
                      co.collname)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
          AND a.attnum > 0 AND NOT a.attisdropped
    """,
    "constraint": """
        SELECT coalesce(c.relname, t.typname) || '.' || con.conname,
               format('%s deferrable=%s deferred=%s validated=%s', pg_get_constraintdef(con.oid),
                      con.condeferrable, con.condeferred, con.convalidated)
        FROM pg_constraint con
        JOIN pg_namespace n ON n.oid = con.connamespace
        LEFT JOIN pg_class c ON c.oid = con.conrelid
        LEFT JOIN pg_type t ON t.oid = con.contypid
        WHERE n.nspname = current_schema()
    """,
    "index": """
        SELECT ic.relname, pg_get_indexdef(i.indexrelid)
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = ic.relnamespace
        WHERE n.nspname = current_schema()
    """,
    # The body is compared apart (see function_body), without its comments.
    "function": """
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
               format('kind=%s arguments=%s returns=%s language=%s volatility=%s strict=%s '
                      'security_definer=%s parallel=%s config=%s',
                      p.prokind, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                      l.lanname, p.provolatile, p.proisstrict, p.prosecdef, p.proparallel,
                      array_to_string(p.proconfig, ','))
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = current_schema()
    """,
    "function_body": """
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
               CASE WHEN p.prosqlbody IS NULL THEN p.prosrc ELSE pg_get_functiondef(p.oid) END
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema()
    """,
    "trigger": """
        SELECT c.relname || '.' || t.tgname,
               format('%s enabled=%s', pg_get_triggerdef(t.oid), t.tgenabled)
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND NOT t.tgisinternal
    """,
    # Owned by: an identity column ('i') or a serial-style OWNED BY ('a').
    "sequence": """
        SELECT c.relname,
               format('%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
                      format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                      s.seqmax, s.seqcache, s.seqcycle, owner.what)
        FROM pg_sequence s
        JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN LATERAL (
            SELECT format('%s:%s.%s', d.deptype, r.relname, a.attname) AS what
            FROM pg_depend d
            JOIN pg_class r ON r.oid = d.refobjid
            JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
              AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
        ) owner ON true
        WHERE n.nspname = current_schema()
    """,
    "view": """
        SELECT c.relname, pg_get_viewdef(c.oid, true)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('v', 'm')
    """,
    # Domains, enums, ranges (a table's row type and array types come with their relation).
    "type": """
        SELECT t.typname,
               format('kind=%s base=%s not_null=%s default=%s labels=%s', t.typtype,
                      format_type(t.typbasetype, t.typtypmod), t.typnotnull,
                      pg_get_expr(t.typdefaultbin, 0),
                      (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                       FROM pg_enum e WHERE e.enumtypid = t.oid))
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = current_schema() AND t.typtype IN ('d', 'e', 'r', 'm')
    """,
    "policy": """
        SELECT c.relname || '.' || p.polname,
               format('command=%s permissive=%s using=%s check=%s', p.polcmd, p.polpermissive,
                      pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
        FROM pg_policy p
        JOIN pg_class c ON c.oid = p.polrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema()
    """,
    "comment": """
        SELECT c.relname || coalesce('.' || a.attname, ''), d.description
        FROM pg_description d
        JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND d.objoid = c.oid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid
                                 AND d.objsubid > 0
        WHERE n.nspname = current_schema()
        UNION ALL
        SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
               d.description
        FROM pg_description d
        JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND d.objoid = p.oid
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema()
    """,
}

TABLES = """
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
"""

_COMMENT_OR_QUOTED = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", re.S)


def function_body(text: str) -> str:
    """A body without its comments, whitespace folded: what it does, not how it is laid
    out. Quoted strings and identifiers are kept as they are (a ``--`` inside one is not a
    comment)."""
    kept = _COMMENT_OR_QUOTED.sub(
        lambda m: " " if m.group().startswith(("--", "/*")) else m.group(), text
    )
    return " ".join(kept.split())


def describe(dsn: str) -> Catalog:
    """Every object of the DSN's schema as ``"kind name" -> description``, with the schema's
    own name taken out (index and trigger definitions qualify their table with it)."""
    found: Catalog = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        assert row is not None and row[0], "the DSN names no schema"
        qualified = re.compile(rf'(?<![\w$])"?{re.escape(row[0])}"?\.')
        for kind, query in CATALOG_QUERIES.items():
            for name, description in conn.execute(query.encode()).fetchall():
                text = qualified.sub("", description or "")
                if kind == "function_body":
                    text = function_body(text)
                key = f"{kind} {name}"
                assert key not in found, f"two objects describe as {key}"
                found[key] = text
        # The rows a migration seeds (tenure_secrets' key) are part of what it builds; the
        # migration runner's own bookkeeping is not.
        for (table,) in conn.execute(TABLES.encode()).fetchall():
            if table == "tenure_migrations":
                continue
            count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            counted = conn.execute(count).fetchone()
            assert counted is not None
            found[f"rows {table}"] = str(counted[0])
    return found


def differences(migrated: Catalog, declared: Catalog) -> dict[str, tuple[str | None, str | None]]:
    """Each object whose description differs: name -> (from the migrations, from schema.sql)."""
    return {
        key: (migrated.get(key), declared.get(key))
        for key in sorted(migrated.keys() | declared.keys())
        if migrated.get(key) != declared.get(key)
    }


def report(diff: dict[str, tuple[str | None, str | None]]) -> str:
    lines = [
        f"schema.sql and the migrations differ in {len(diff)} object(s); "
        "update src/tenure/_store/schema.sql:"
    ]
    for key, (migrated, declared) in diff.items():
        if declared is None:
            lines.append(f"  missing from schema.sql: {key}\n      migrations: {migrated}")
        elif migrated is None:
            lines.append(f"  only in schema.sql:      {key}\n      schema.sql: {declared}")
        else:
            lines.append(
                f"  differs:                 {key}\n"
                f"      migrations: {migrated}\n      schema.sql: {declared}"
            )
    return "\n".join(lines)


def apply_schema(database_dsn: str, text: str) -> str:
    """A fresh schema with ``text`` (schema.sql, or a changed copy) applied to it."""
    dsn = fresh_schema_dsn(database_dsn, "declared")
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(text.encode())
    return dsn


@pytest.fixture(scope="module")
def migrated(database_dsn: str) -> Catalog:
    """The catalog the migrations build, in a schema of its own."""
    dsn = fresh_schema_dsn(database_dsn, "migrated")
    migrate(dsn)
    return describe(dsn)


@pytest.fixture(scope="module")
def declared(database_dsn: str) -> Catalog:
    """The catalog schema.sql builds, in a schema of its own."""
    return describe(apply_schema(database_dsn, SCHEMA_SQL.read_text(encoding="utf-8")))


def test_schema_sql_builds_what_the_migrations_build(migrated: Catalog, declared: Catalog) -> None:
    diff = differences(migrated, declared)
    if diff:
        pytest.fail(report(diff), pytrace=False)
    # Not vacuous: every kind of object tenure has was described and compared.
    kinds = {key.split(" ", 1)[0] for key in migrated}
    every = "relation column constraint index function function_body trigger sequence view rows"
    assert set(every.split()) <= kinds
    assert "function tenure_admit(p_tools text[], p_wanted integer)" in migrated


def test_schema_sql_names_the_newest_migration() -> None:
    newest = discover(MIGRATIONS_PACKAGE)[-1]
    stated = AS_OF.findall(SCHEMA_SQL.read_text(encoding="utf-8"))
    assert stated == [f"{newest.version:04d}_{newest.name}"], (
        f"schema.sql's header says it is as of {stated}, but the newest migration is "
        f"{newest.version:04d}_{newest.name}: bring schema.sql up to date and move that line"
    )


def test_the_schema_reference_lists_every_table(migrated: Catalog) -> None:
    section = SCHEMA_PAGE.read_text(encoding="utf-8").split("\n## schema.sql\n", 1)[0]
    tables = {key.split(" ", 1)[1] for key, kind in migrated.items() if kind.startswith("kind=r ")}
    assert "tenure_jobs" in tables
    listed = set(re.findall(r"^- `(tenure_\w+)`:", section, re.MULTILINE))
    assert listed == tables, f"docs/reference/schema.md lists {sorted(listed)}"


# The comparison itself must see a change of each kind: schema.sql with one thing changed
# differs from schema.sql in exactly the objects that change touches (and in nothing when
# only a comment changed). Compared with schema.sql itself, not with the migrations, so a
# new migration fails the two tests above and not these.
MUTATIONS = [
    pytest.param(
        "priority          smallint    NOT NULL DEFAULT 0,",
        "priority          integer     NOT NULL DEFAULT 0,",
        {"column tenure_jobs.priority"},
        id="column-type",
    ),
    pytest.param(
        "payload_hmac      text        CHECK (length(payload_hmac) <= 128),",
        "payload_hmac      text        CHECK (length(payload_hmac) <= 129),",
        {"constraint tenure_jobs.tenure_jobs_payload_hmac_check"},
        id="check-constraint",
    ),
    pytest.param(
        "ON tenure_jobs (tool, prune_after)",
        "ON tenure_jobs (prune_after, tool)",
        {"index tenure_jobs_prune"},
        id="index-columns",
    ),
    pytest.param(
        "PERFORM pg_notify(p_channel, array_to_string(p_items[v_from:v_from + 299], ','));",
        "PERFORM pg_notify(p_channel, array_to_string(p_items[v_from:v_from + 199], ','));",
        {"function_body tenure_notify(p_channel text, p_items text[])"},
        id="function-body",
    ),
    pytest.param(
        "FOR EACH ROW WHEN (NEW.state = 'queued' AND",
        "FOR EACH ROW WHEN (NEW.state = 'waiting' AND",
        {"trigger tenure_jobs.tenure_jobs_requeued"},
        id="trigger-condition",
    ),
    pytest.param(
        "CREATE SEQUENCE tenure_position_floor AS bigint MINVALUE 0 START 0;",
        "CREATE SEQUENCE tenure_position_floor AS bigint MINVALUE 0 START 1;",
        {"sequence tenure_position_floor"},
        id="sequence-start",
    ),
    pytest.param(
        "r.updated_at,\n       coalesce(",
        "r.created_at AS updated_at,\n       coalesce(",
        {"view tenure_pipeline_overview"},
        id="view-definition",
    ),
    pytest.param(
        "-- The rescuer finds expired waitpoints from here; answering goes by token_hash.\n",
        "-- The rescuer finds expired waitpoints from here; answering goes by token_hash.\n"
        "CREATE INDEX tenure_waitpoints_job ON tenure_waitpoints (job_id);\n",
        {"index tenure_waitpoints_job", "relation tenure_waitpoints_job"},
        id="extra-index",
    ),
    pytest.param(
        "    v_sent integer := 0;\n",
        "    v_sent  integer := 0;  -- how many went out; a '--' in a comment is fine\n",
        set(),
        id="function-comment-is-no-difference",
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), MUTATIONS)
def test_a_changed_schema_sql_is_reported_object_by_object(
    database_dsn: str, declared: Catalog, before: str, after: str, expected: set[str]
) -> None:
    text = SCHEMA_SQL.read_text(encoding="utf-8")
    assert text.count(before) == 1, f"schema.sql no longer contains {before!r}"
    changed = describe(apply_schema(database_dsn, text.replace(before, after)))
    assert set(differences(declared, changed)) == expected
