"""One step of a soak cycle in a process of its own, as each is an Airflow task process of its own:
``python -m lockstep_soak.step plan|run|commit SPEC [CHECKPOINT]``. They call what the DAG's
operators call (``coordinator.plan``, ``steps.run.run_checkpoint``, ``coordinator.commit``).
``state SPEC`` prints the latest completed checkpoint's state manifest, for the stateful soak's audit;
``status SPEC [CHECKPOINT ...]`` each checkpoint's status as users read it (``CheckpointView.status_text``,
"completed after repair" for a repaired one), every checkpoint in the store when none is named.
The last line of stdout is JSON for the driver; failures end with the error's message, exit 2."""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
import uuid


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    from lockstep.errors import LockstepError
    from lockstep.rules.run_ownership import cli_run_id
    from lockstep.spec import load_spec
    from lockstep.steps.coordinator import Pipeline, commit, plan, run_checkpoint

    step, spec_path, *rest = argv
    spec = load_spec(spec_path)
    doc: dict[str, object]
    try:
        p = Pipeline.open(spec)
        if step == "plan":
            # The run id names this process: once it is gone, the next plan may recover its claim.
            result = plan(p, run_id=cli_run_id(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8]))
            doc = {"checkpoint_id": result.claim.checkpoint_id, "records": result.range_plan.total_records}
        elif step == "run":
            run_checkpoint(spec, int(rest[0]), p.store)
            doc = {"checkpoint_id": int(rest[0])}
        elif step == "commit":
            outcome = commit(p, int(rest[0]))
            doc = {"checkpoint_id": int(rest[0]), "status": outcome.status.value}
        elif step == "state":
            latest = p.store.latest_completed()
            manifest = latest.completed.state if latest is not None and latest.completed is not None else None
            doc = {"checkpoint": latest.checkpoint_id if latest is not None else None,
                   "manifest": manifest.to_json() if manifest is not None else None}
        elif step == "status":
            ids = [int(r) for r in rest] if rest else list(p.store.checkpoint_ids())
            views = {cid: p.store.view(cid) for cid in ids}
            doc = {"statuses": {str(cid): (v.status_text if v is not None else None) for cid, v in views.items()}}
        else:
            raise SystemExit(f"unknown step {step!r}: plan, run, commit, state or status")
    except LockstepError as exc:
        print(f"lockstep soak step {step}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
