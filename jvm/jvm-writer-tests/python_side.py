"""The Python side of the JVM writer's unit tests (jvm/jvm-writer-tests), run by them as a child
process with the project's Python, so the tests hold the writer to what the Python code really sends
and really parses, not to a copy of it.

    python_side.py settings   the writer settings the driver sends (`sparkjob.jvm_settings`), with the
                              contract's committable schema, fields and `job.mid_produce` wording, and
                              the failpoint actions and the words of one that raised in a first attempt
    python_side.py parse      each stdin line is a task result document; prints, a line each, what
                              `output_contract.parse_task_result` makes of it: [task, rows, committable],
                              the committable also read by `PreparedTransaction.from_json`
"""
from __future__ import annotations

import json
import sys

from lockstep.model import failpoints
from lockstep.model import output_contract as contract
from lockstep.model.checkpoint import PreparedTransaction
from lockstep.spark.jvm_writer import jvm_settings
from lockstep.spark.writer_settings import WriterSettings


def settings() -> dict[str, object]:
    writer = WriterSettings(bootstrap="127.0.0.1:9", producer_config={"acks": "all"}, id_prefix="ls", pipeline="orders",
                            checkpoint_id=7, timeout_ms=60_000, sink_topic="out", dead_letter_topic="out.dlq")
    return {"settings": jvm_settings(writer), "committable_schema": contract.COMMITTABLE_SCHEMA,
            "committable_fields": list(contract.COMMITTABLE_FIELDS),
            "mid_produce_message_task_3": contract.mid_produce_message(3, contract.MID_PRODUCE_AFTER_RECORDS),
            # What a Spark task's failpoint may do: every action but those of Lockstep's own processes (pause).
            "failpoint_actions": [a for a in failpoints.ACTIONS if a not in failpoints.PROCESS_ACTIONS],
            "mid_produce_first_attempt_raised_task_3": failpoints.raised_message(
                "job.mid_produce", contract.mid_produce_message(3, contract.MID_PRODUCE_AFTER_RECORDS),
                failpoints.RAISE_FIRST_ATTEMPT)}


def parse(line: str) -> list[object]:
    task, rows, committable = contract.parse_task_result(line)
    if committable is not None:
        PreparedTransaction.from_json(committable, f"task {task}")  # the checkpoint reader's types too
    return [task, rows, committable]


if __name__ == "__main__":
    if sys.argv[1:] == ["settings"]:
        print(json.dumps(settings()))
    elif sys.argv[1:] == ["parse"]:
        for line in sys.stdin:
            print(json.dumps(parse(line)))
    else:
        sys.exit(__doc__)
