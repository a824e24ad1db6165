"""Each collection's chunks in a partition of their own (`retrieval_chunk` is LIST-partitioned
by `collection_id`, migration retrieval.0009).

A collection's search reads its own partition's HNSW graph and GIN postings only: in one
shared table, a 100k-chunk collection beside 310k other chunks walked a graph and read
posting lists spanning all of them (the search stage 29 ms p50 against 5 ms alone).

A collection gets its partition before its first chunk is written (ingestion calls
`partition_ensure`); a chunk of a collection without one is refused by Postgres ("no partition
of relation found"). There is deliberately no DEFAULT partition: attaching a partition locks
the default one ACCESS EXCLUSIVE, so every collection's first ingestion would have stopped the
searches of the collections kept there; without it, attaching takes SHARE UPDATE EXCLUSIVE on
the parent only, and searches and writes go on.

The SQL is composed here and run by whoever holds the connection (ingestion through Django's,
the benchmark through its own); every statement takes the collection id as an int, never text.
"""

from __future__ import annotations

from typing import Any, Protocol

PARENT = "retrieval_chunk"
# A row with its 384-dimension embedding is ~3 kB: kept whole in its heap page, not moved to
# TOAST (retrieval.0008; a partitioned table takes no storage parameters, each partition does).
STORAGE = "WITH (toast_tuple_target = 8160)"


class Cursor(Protocol):
    """What the statements below need: a Django cursor and a psycopg connection both fit
    (each `execute` returns a psycopg cursor)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


def partition_name(collection_id: int) -> str:
    """The table that holds one collection's chunks."""
    return f"{PARENT}_c{int(collection_id)}"


def create_detached_sql(collection_id: int) -> str:
    """A table shaped like a partition, not attached yet: a bulk load fills it without the
    indexes, and `attach_sql` builds them once (the benchmark's load)."""
    return (
        f"CREATE TABLE {partition_name(collection_id)} "
        f"(LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE) {STORAGE}"
    )


def attach_sql(collection_id: int) -> str:
    """Attach the table as the collection's partition; Postgres builds its indexes and checks
    its rows (SHARE UPDATE EXCLUSIVE on the parent: searches and writes go on)."""
    cid = int(collection_id)
    return f"ALTER TABLE {PARENT} ATTACH PARTITION {partition_name(cid)} FOR VALUES IN ({cid})"


def partition_exists(cursor: Cursor, collection_id: int) -> bool:
    """Whether the collection has its partition (else its chunks cannot be written)."""
    found = cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass AND p.relname = %s)",
        [PARENT, partition_name(collection_id)],
    ).fetchone()
    return bool(found and found[0])


def partition_ensure(cursor: Cursor, collection_id: int) -> bool:
    """Give the collection its partition unless it has one; True if made now.

    Run inside a transaction: an advisory lock makes two workers ingesting parts of one job
    agree.
    """
    cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", [PARENT, int(collection_id)])
    if partition_exists(cursor, collection_id):
        return False
    cursor.execute(create_detached_sql(collection_id))
    cursor.execute(attach_sql(collection_id))
    return True


def partition_analyze(cursor: Cursor, collection_id: int) -> None:
    """Refresh the planner's statistics of the collection's partition, if it has one.

    A new partition has none until autovacuum comes by (a minute or more after the load):
    meanwhile the planner guesses. Evaluating MTRAG clapnq right after ingesting its 6.9k
    chunks searched at 52 and 83 ms p50 (no rewrite, last turn) before autovacuum's analyze,
    4.5 and 4.3 ms after it. It runs where the collection's word statistics are rebuilt.
    """
    if partition_exists(cursor, collection_id):
        cursor.execute(f"ANALYZE {partition_name(collection_id)}")
