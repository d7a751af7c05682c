"""Tables and joins, in one room (docs/joins.md): the latest row per key of a compacted topic, joined to the
stream as the claim pins it, and the stream-stream interval join beside them.

Its modules, from the ground up (each on the floor of docs/DESIGN.md's map its role belongs to):

- ``interval_join``: the stream-stream interval join, a state function Lockstep runs for you; pure.
- ``pins``: which version of each table a checkpoint joined against, as the claim records it; pure data.
- ``pinning``: which records of a table's topic a checkpoint reads and when a table's chain of files is
  compacted; pure decisions the plan makes and the run carries out.
- ``chain``: a versioned table's rows (which versions of each key a delta keeps), over pyarrow.
- ``materialize``: a table's version materialized in the run from its stored files and its pinned records,
  written back as files, and joined to the stream (``join_tables``); the only module of the room that
  imports Spark.

A table's files are stored with the keyed state's (`lockstep.store.state_files`, one immutable object per
checkpoint); this room says what goes in them. A new kind of table or join adds its pin to ``pins``, its
reads to ``pinning`` and its work to ``materialize``: this package and its tests."""

__all__ = [
    "chain", "interval_join", "materialize", "pinning", "pins",
]
