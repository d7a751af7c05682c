"""An Iceberg table (``sink.iceberg``) read back against its sink topic, by provenance: each record of
``sink.topic`` a row on the table's main branch, once, and no other row. ``lockstep verify`` (stateless and
stateful) and the soak's audit use it; the topic itself is checked against the recomputed input elsewhere."""
from __future__ import annotations

__all__ = ["TableCheck", "check_table", "table_check"]

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from lockstep.model.offsets import OffsetRange
from lockstep.rules.output_diff import compare_counts
from lockstep.rules.ranges import within
from lockstep.spec import PipelineSpec

#: An input record: (topic, partition, offset).
Offset = tuple[str, int, int]


@dataclass
class TableCheck:
    """The Iceberg table's rows (by provenance) against the records of ``sink.topic``: each record a row, once."""

    table: str
    rows: int
    records: int
    lost: list[Offset] = field(default_factory=list)
    duplicated: list[Offset] = field(default_factory=list)
    unexpected: list[Offset] = field(default_factory=list)
    #: What the rows are checked against: the sink topic's records, or (no ``sink.topic``) the outputs recomputed.
    against: str = "records of the sink topic"

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def to_json(self) -> dict[str, object]:
        def sample(xs: Sequence[Offset]) -> list[str]:
            return [f"{t}:{p}@{o}" for t, p, o in xs[:20]]

        return {"table": self.table, "ok": self.ok, "rows": self.rows, "sink_records": self.records,
                "lost": len(self.lost), "duplicated": len(self.duplicated), "unexpected": len(self.unexpected),
                "lost_sample": sample(self.lost), "duplicated_sample": sample(self.duplicated),
                "unexpected_sample": sample(self.unexpected)}

    def summary(self) -> str:
        return (f"Iceberg table {self.table}: {self.rows} rows on its main branch for {self.records} {self.against}; "
                f"{len(self.lost)} lost, {len(self.duplicated)} duplicated, {len(self.unexpected)} unexpected")


def check_table(table: str, rows: Counter[Offset], records: Counter[Offset]) -> TableCheck:
    """Each record of the sink topic a row of the table, once, and no other row (pure)."""
    lost, duplicated, unexpected = compare_counts(records, rows)
    return TableCheck(table, sum(rows.values()), sum(records.values()), lost, duplicated, unexpected)


def table_check(spec: PipelineSpec, since: int | None, main: Counter[Offset], gone: list[OffsetRange],
                rows: Counter[Offset] | None = None, leave_out: Collection[Offset] = ()) -> TableCheck:
    """The table's rows from checkpoint ``since`` on (read here, or ``rows`` when read already) against ``main``:
    ``sink.topic``'s records, or, without a sink topic, the outputs recomputed for the table; both without the
    offsets that could not be checked, and without ``leave_out``."""
    from lockstep.iceberg.table_sink import IcebergTable

    iceberg = spec.sink.iceberg
    assert iceberg is not None  # the caller's condition
    if rows is None:
        rows = IcebergTable(iceberg.catalog_conn_id, iceberg.table).provenance(since)
    skipped = set(leave_out)
    check = check_table(iceberg.table, Counter({k: n for k, n in rows.items() if not within(k, gone) and k not in skipped}),
                        Counter({k: n for k, n in main.items() if not within(k, gone) and k not in skipped}))
    if spec.sink.table_only:
        check.against = "outputs recomputed from the input"
    return check


