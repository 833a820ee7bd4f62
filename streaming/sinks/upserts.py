"""The conditional upsert of a database sink, per SQL dialect: a row is written only if it is newer.

"Newer" is ``(epoch, version)`` compared as a pair: the application's reset epoch first, then the version the
user keeps in the value. A replayed (older or equal) row leaves the stored one as it is, so flushing the same
rows twice, or an old row after a new one, changes nothing.

* PostgreSQL and SQLite: ``INSERT ... ON CONFLICT (key) DO UPDATE SET col = excluded.col, ...
  WHERE (t.epoch, t.version) < (excluded.epoch, excluded.version)`` (row values: SQLite 3.15+).
* MySQL and MariaDB: ``INSERT ... ON DUPLICATE KEY UPDATE col = IF(newer, VALUES(col), col), ...`` with the
  version and then the epoch column assigned LAST: MySQL evaluates the assignments left to right, each seeing
  the columns already assigned, so ``newer`` must still read the stored version and epoch for every other
  column. (Assigning the version before the epoch keeps the epoch's own test right: once the version holds the
  new value, ``(stored epoch, new version) < (new epoch, new version)`` is ``stored epoch < new epoch``.)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Table, func, tuple_
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.sql.dml import Insert

#: The dialects (SQLAlchemy backend names) a database sink writes.
DIALECTS = ("mysql", "mariadb", "postgresql", "sqlite")


def upsert_statement(dialect: str, table: Table, epoch: Column[Any], version: Column[Any]) -> Insert:
    """The conditional upsert of one row into ``table`` for ``dialect`` (one of :data:`DIALECTS`), to execute
    with a list of row dicts (executemany)."""
    keys = [column.name for column in table.primary_key.columns]
    if dialect in ("mysql", "mariadb"):
        return _on_duplicate_key(table, keys, epoch, version)
    if dialect == "postgresql":
        return _on_conflict(postgresql.insert(table), table, keys, epoch, version)
    if dialect == "sqlite":
        return _on_conflict(sqlite.insert(table), table, keys, epoch, version)
    raise ValueError(f"no upsert for SQL dialect {dialect!r}; supported: {', '.join(DIALECTS)}")


def _on_conflict(insert: Any, table: Table, keys: list[str], epoch: Column[Any], version: Column[Any]) -> Insert:
    excluded = insert.excluded
    newer = tuple_(table.c[epoch.name], table.c[version.name]) < tuple_(excluded[epoch.name], excluded[version.name])
    updated = {column.name: excluded[column.name] for column in table.columns if column.name not in keys}
    return insert.on_conflict_do_update(index_elements=keys, set_=updated, where=newer)


def _on_duplicate_key(table: Table, keys: list[str], epoch: Column[Any], version: Column[Any]) -> Insert:
    insert = mysql.insert(table)
    new = insert.inserted
    newer = tuple_(table.c[epoch.name], table.c[version.name]) < tuple_(new[epoch.name], new[version.name])
    last = [version.name, epoch.name]
    ordered = [column.name for column in table.columns if column.name not in keys and column.name not in last] + last
    return insert.on_duplicate_key_update([(name, func.IF(newer, new[name], table.c[name]))
                                           for name in ordered])
