"""Example: a DAG scheduled on committed Lockstep output (the sink topics' Assets).

Every pipeline's commit task updates the Asset ``kafka://<bootstrap>/<sink topic>`` once its
checkpoint completed with records (none for a failed, aborted or empty checkpoint), with the
checkpoint id, the record count and the end offsets in the event's extra. This DAG runs after
any such commit and logs what it received; copy it and schedule on the one pipeline you need:

    from lockstep_airflow.dag_factory import sink_asset
    with DAG("orders_report", schedule=[sink_asset("orders")], ...):

Paused at creation like any DAG; unpause it to see it react to commits.
"""
from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, AssetAny, task

from lockstep_airflow.dag_factory import START_DATE, sink_assets

log = logging.getLogger("lockstep.downstream_example")
assets = sink_assets()

if assets:
    with DAG(
        dag_id="lockstep_downstream_example",
        schedule=AssetAny(*assets),
        start_date=START_DATE,
        catchup=False,
        description="Example: runs after any Lockstep pipeline committed records to its sink topic",
        doc_md=__doc__,
        tags=["lockstep", "example"],
    ):
        @task
        def committed_output(**context: Any) -> list[dict[str, Any]]:
            received = []
            for asset, events in context["triggering_asset_events"].items():
                for event in events:
                    extra = dict(event.extra or {})
                    log.info("%s: checkpoint %s committed %s records (end offsets %s)", asset.uri,
                             extra.get("checkpoint_id"), extra.get("records"), extra.get("end_offsets"))
                    received.append({"uri": asset.uri, **extra})
            return received

        committed_output()
