"""``lockstep bench --state-only``: what keyed state costs per checkpoint, measured by state size.

For each state size K (``--state-keys``, default 100,000, 1,000,000 and 10,000,000 keys), over one input
topic of its own and side by side in the same run:

* a **stateful** pipeline, ``dedup: {key: order_id, ttl: 400d, duplicates: dead_letter}`` over
  ``lockstep_examples.orders:parse``: one state row per distinct order id, so the state's bytes divided
  by its keys is the cost of a key on S3 with nothing else in the row;
* the **stateless** baseline, ``lockstep_examples.orders:enrich`` over the same records.

First the build-up: K distinct orders, read by both pipelines in checkpoints until the state holds K
keys (one checkpoint: ``max_records`` is at least K), every size before any measurement. Then
``--state-checkpoints`` measured rounds, each visiting every size in turn (``schedule``): for a size,
``--state-records`` new records are produced, ``--state-new-keys`` of them with order ids the state
does not hold and the rest repeating ids it holds: ``--state-touched`` of the K held keys (1% by
default), a different slice each checkpoint; each pipeline then runs one
checkpoint over exactly these records, the two alternating which goes first. The duplicates are
dead-lettered rather than dropped, so both pipelines write every record they read to Kafka and the
difference between them is the state. Every checkpoint runs in connect mode, on the platform's Spark
Connect server (the runner starts the platform).

At the largest size, after the measured rounds, a **cold** checkpoint as after a restore on a new host:
the Spark Connect server restarted (a new JVM, its start timed on its own) and the local cache of
decoded state files emptied; the same on a server warmed up by the platform's warm-up checkpoints; a
restore on the **same host** (the server restarted and warmed up, the cache kept: it lives on the host of
the run step, which a server's restart does not touch); then a **warm** one; these four ``--state-restores``
times (3 by default: a restore's time swings by a second from one to the next, and one run decided the verdict).
Then, unless ``--state-no-flink``, Flink SQL's RocksDB restore of the same state (``lockstep_bench.flink_restore``):
Flink builds it up from the same topic, then a new Flink process restores it and runs the same kind of
checkpoint, as many times, each restore from the checkpoint the one before it retained. Its checkpoints go to
a local folder, and then, unless ``--state-no-flink-s3``, all of it again with its checkpoints on the
platform's S3 (the next checkpoints' records): there each restore downloads the state, as Lockstep's restore
on a new host does.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep_bench import pipelines as pl
from lockstep_bench import workloads
from lockstep_bench.measure import RunFailed, execute

if TYPE_CHECKING:
    import numpy as np

STATEFUL, STATELESS = "stateful", "stateless"
STATEFUL_TRANSFORM = "lockstep_examples.orders:parse"
STATELESS_TRANSFORM = "lockstep_examples.orders:enrich"
#: ``lockstep_dev.datagen.order(i)``'s created_at is 1,700,000,000 + i seconds: 10,000,000 keys span about
#: 116 days of event time, inside the TTL, so no key expires and no repeated order is late (with 30 days,
#: the 10M-key build-up kept only its last 2,592,013 keys: the TTL did its job, the benchmark was wrong).
TTL = "400d"


@dataclass
class StateSettings:
    keys: tuple[int, ...] = (100_000, 1_000_000, 10_000_000)
    records: int = 100_000  # new records per measured checkpoint
    checkpoints: int = 3  # measured checkpoints per state size
    new_keys: int = 100  # of each checkpoint's records, the ones with keys the state does not hold yet
    touched: float = 0.01  # the share of the held keys a checkpoint's repeats touch
    partitions: int = 4
    key_groups: int = 32  # as include/pipelines/orders_per_customer.yaml
    report: Path = Path("docs/BENCHMARKS-state.md")
    results: Path | None = None
    state_dir: Path | None = None
    flink: bool = True  # Flink's RocksDB restore at the largest size (lockstep_bench.flink_restore)
    #: ... again with Flink's checkpoints on the platform's S3, as a production Flink keeps them: each restore then
    #: downloads the state, as Lockstep's does on a new host
    flink_s3: bool = True
    restores: int = 3  # rounds of the restore's checkpoints (TEMPERATURES), and Flink's restores, at the largest size

    def __post_init__(self) -> None:
        if not self.keys or min(self.keys) < 1:
            raise ValueError(f"--state-keys needs positive sizes, got {self.keys}")
        if not 0 <= self.new_keys <= self.records:
            raise ValueError(f"--state-new-keys ({self.new_keys}) must be between 0 and --state-records "
                             f"({self.records})")
        if self.checkpoints < 1:
            raise ValueError("--state-checkpoints must be at least 1")
        if self.restores < 1:
            raise ValueError("--state-restores must be at least 1")
        if not 0 < self.touched <= 1:
            raise ValueError(f"--state-touched must be above 0 and at most 1, got {self.touched}")

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in self.__dict__.items()}


def dedup_state(key_groups: int) -> dict[str, Any]:
    """The stateful pipeline's ``state`` section."""
    return {"key_groups": key_groups, "event_time": {"column": "created_at", "out_of_orderness": "10s"},
            "dedup": {"key": "order_id", "ttl": TTL, "duplicates": "dead_letter"}}


def touched_keys(keys: int, records: int, new_keys: int, touched: float) -> int:
    """How many held keys a checkpoint's repeats touch: ``touched`` of the state, at least one, at most
    one per repeat."""
    return max(1, min(round(keys * touched), records - new_keys, keys))


def checkpoint_indices(keys: int, records: int, new_keys: int, n: int, touched: float = 1.0) -> list[int]:
    """The ``lockstep_dev.datagen.order`` indices of measured checkpoint ``n`` (0-based) over a state of
    ``keys`` keys (orders 0 .. keys-1): ``records - new_keys`` repeats of held orders, cycling over
    ``touched_keys`` of them taken in turn from where the previous checkpoint stopped (so every held
    key is touched as often over the checkpoints), then ``new_keys`` orders never produced before
    (each checkpoint's are new to every later one too)."""
    repeats = records - new_keys
    width = touched_keys(keys, records, new_keys, touched) if repeats else 0
    held = [(n * width + j % width) % keys for j in range(repeats)] if width else []
    start = keys + n * new_keys
    return held + list(range(start, start + new_keys))


def wanted_outputs(starts: dict[int, int], records: int, new_keys: int,
                   partitions: int) -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
    """Per pipeline, what its sink and its dead-letter topic must hold after a checkpoint over the ``records``
    orders `produce` appended to a topic whose partitions ended at ``starts``: for each input offset of each
    partition, whether it has an output there (`lockstep_bench.sink_check.tally`'s ``want``). The n-th order
    produced is at partition ``n % partitions``, offset ``starts[p] + n // partitions``; the last ``new_keys``
    are the new keys (`checkpoint_indices`). The dedup passes the new keys to the sink and dead-letters every
    repeat of a held key; the stateless pipeline writes every order to the sink."""
    import numpy as np

    def masks(which: Callable[[np.ndarray], np.ndarray]) -> list[np.ndarray]:
        out = []
        for p in range(partitions):
            count = records // partitions + (1 if p < records % partitions else 0)
            mask = np.zeros(starts.get(p, 0) + count, dtype=bool)
            mask[starts.get(p, 0):] = which(np.arange(count, dtype=np.int64) * partitions + p)
            out.append(mask)
        return out

    new = records - new_keys
    return {STATEFUL: (masks(lambda n: n >= new), masks(lambda n: n < new)),
            STATELESS: (masks(lambda n: np.ones(len(n), dtype=bool)), masks(lambda n: np.zeros(len(n), dtype=bool)))}


def produce(bootstrap: str, topic: str, indices: list[int], partitions: int,
            place: Callable[[int, int], tuple[int, bytes | None]] | None = None) -> None:
    """The orders of ``indices`` (about 200 bytes each, as the main bench's), round-robin over the
    partitions without a key, or where ``place(n, i)`` says: (partition, key) of the n-th order, order i."""
    from lockstep_dev.datagen import order, send

    def placed(n: int, i: int) -> tuple[bytes, int, bytes | None]:
        partition, key = place(n, i) if place else (n % partitions, None)
        return order(i, pad=workloads.PAD), partition, key

    send(bootstrap, topic, (placed(n, i) for n, i in enumerate(indices)))


#: The restore's checkpoints at the largest size, in the order they run (`StateBench.cold_and_warm`).
TEMPERATURES = ("cold", "warmed", "restarted", "warm")


class StateBench:
    """The two pipelines of every state size, each checkpoint one process timed by ``measure.execute``."""

    def __init__(self, settings: StateSettings, bootstrap: str, remote: str, connect_pid: int, work_dir: Path,
                 log: Callable[[str], None], restart_connect: Callable[[bool], int] | None = None,
                 bucket: str | None = None) -> None:
        """``restart_connect(warm_checkpoints)``: stops and starts the platform's Spark Connect server (with
        the platform's warm-up checkpoints or without), returns its new pid (the cold checkpoints'
        restarts); without it the cold checkpoints only empty the cache. ``bucket``: the platform's S3 bucket,
        where Flink's checkpoints go in its second chain of restores (none: that chain does not run)."""
        self.s = settings
        self.bucket = bucket
        self.bootstrap = bootstrap
        self.remote = remote
        self.connect_pid = connect_pid
        self.work_dir = work_dir
        self.log = log
        self.restart_connect = restart_connect
        #: each pipeline's spec -> its sink and dead-letter topics
        self.outputs: dict[Path, tuple[str, str]] = {}

    def _specs(self, keys: int, topic: str) -> dict[str, Path]:
        tag = uuid.uuid4().hex[:6]
        specs = {}
        for kind, transform, state in ((STATEFUL, STATEFUL_TRANSFORM, dedup_state(self.s.key_groups)),
                                       (STATELESS, STATELESS_TRANSFORM, None)):
            sink = f"{topic}-{kind}-out"
            workloads.create_topic(self.bootstrap, sink, self.s.partitions)
            workloads.create_topic(self.bootstrap, f"{sink}-dlq", self.s.partitions)
            specs[kind] = workloads.write_spec(self.work_dir / "specs", f"bench-state-{kind}-{keys}-{tag}", topic, sink,
                                               max(keys, self.s.records), remote=self.remote, transform=transform,
                                               state=state)
            self.outputs[specs[kind]] = (sink, f"{sink}-dlq")  # write_spec's dead-letter topic
        return specs

    def checkpoint(self, kind: str, spec: Path, records: int, label: str, repeat: int = 0,
                   want: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> dict[str, Any]:
        """One checkpoint of ``kind``'s pipeline, timed; with ``want`` (`wanted_outputs`), its sink and its
        dead-letter topic read back (read_committed) from where they ended before it and checked against it
        (``sink``: both together; ``outputs``: each), a checkpoint that is not exact failing the benchmark."""
        from lockstep_bench import sink_check

        topics = self.outputs[spec]
        starts = [workloads.end_offsets(self.bootstrap, t) for t in topics] if want is not None else []
        run = execute(f"{kind} checkpoint ({label})", pl.lockstep_command(spec, self.connect_pid), records,
                      self.s.partitions, repeat=repeat)
        if run.inner.get("records_in") != records:
            raise RunFailed(f"{kind} checkpoint ({label}) read {run.inner.get('records_in')} records, expected {records}")
        if kind == STATEFUL and "state" not in run.inner:
            raise RunFailed(f"{kind} checkpoint ({label}) committed no state manifest")
        outputs = {}
        if want is not None:
            checks = [sink_check.read_back(self.bootstrap, t, w, starts=st) for t, w, st in zip(topics, want, starts,
                                                                                                  strict=True)]
            outputs = {"sink": checks[0].to_json(), "dead_letter": checks[1].to_json()}
            run.sink = sink_check.SinkCheck(*(sum(getattr(c, f) for c in checks) for f in (
                "records", "expected", "missing", "duplicates", "unexpected"))).to_json()
            if not run.sink["exact"]:
                raise RunFailed(f"{kind} checkpoint ({label}): its output was not exact: sink "
                                f"{checks[0].summary()}; dead letters {checks[1].summary()}")
        state = run.inner.get("state") or {}
        self.log(f"{kind:9} {label}: {run.inner['total_s']:6.2f} s (Spark {run.inner['spark_seconds']:.2f} s)"
                 + (f"  read back: sink {outputs['sink']['records']:,}, dead letters "
                    f"{outputs['dead_letter']['records']:,}, exact" if outputs else "")
                 + (f"  state {state['keys']:,} keys {state['bytes']:,} B in {state['files']} files  "
                    f"{state['metrics']}" if state else ""))
        return {**run.to_json(), "pipeline": kind, **({"outputs": outputs} if outputs else {})}

    def build(self, keys: int) -> dict[str, Any]:
        """A state size's topic and pipelines, and its build-up: both pipelines read ``keys`` distinct orders."""
        topic = f"bench-state-{keys}-{uuid.uuid4().hex[:6]}"
        workloads.create_topic(self.bootstrap, topic, self.s.partitions)
        size: dict[str, Any] = {"keys": keys, "topic": topic, "specs": self._specs(keys, topic), "buildup": [],
                                "checkpoints": []}
        started = time.monotonic()
        produce(self.bootstrap, topic, list(range(keys)), self.s.partitions)
        self.log(f"{keys:,} keys: build-up input produced in {time.monotonic() - started:.1f} s")
        # Every order is a new key: the dedup passes each to its sink, the stateless pipeline too.
        want = wanted_outputs({}, keys, keys, self.s.partitions)
        size["buildup"] = [self.checkpoint(kind, size["specs"][kind], keys, f"{keys:,} keys, build-up",
                                           want=want[kind])
                           for kind in (STATELESS, STATEFUL)]
        held = size["buildup"][-1]["inner"]["state"]["keys"]
        if held != keys:
            raise RunFailed(f"the build-up of {keys:,} distinct orders left {held:,} keys in the state")
        return size

    def round(self, size: dict[str, Any], n: int, stateful_first: bool) -> None:
        """Measured checkpoint ``n`` of one size: its records produced, then one checkpoint of each pipeline."""
        keys = size["keys"]
        want = self.produce(size, n)
        order = (STATEFUL, STATELESS) if stateful_first else (STATELESS, STATEFUL)
        size["checkpoints"].append({kind: self.checkpoint(kind, size["specs"][kind], self.s.records,
                                                          f"{keys:,} keys, checkpoint {n + 1}", repeat=n,
                                                          want=want[kind])
                                    for kind in order})

    def produce(self, size: dict[str, Any], n: int) -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
        """Measured checkpoint ``n``'s records appended to the size's topic; what each pipeline must output."""
        starts = workloads.end_offsets(self.bootstrap, size["topic"])
        produce(self.bootstrap, size["topic"],
                checkpoint_indices(size["keys"], self.s.records, self.s.new_keys, n, self.s.touched), self.s.partitions)
        return wanted_outputs(starts, self.s.records, self.s.new_keys, self.s.partitions)

    def cold_and_warm(self, size: dict[str, Any], n: int) -> int:
        """At the largest size, each over its own records: a restore's first checkpoint on a new host
        (``cold``: the Spark Connect server restarted, a new JVM with its one warm-up query, and the
        local cache of decoded state files emptied: every touched group's files downloaded and
        decoded); the same with a server that ran the platform's warm-up checkpoints when it started
        (``warmed``: `lockstep_dev.warm_checkpoints`, the cache emptied after them); a restore on the same
        host (``restarted``: the server restarted and warmed up again, the cache as the warmed one left it);
        then the next checkpoint (``warm``: the server and the cache as the one before it left them). The
        server's restart, warm-up included, is timed apart from the checkpoint (``server_start_s``).

        The four ``restores`` times over (``size["cold_warm"]``: each temperature's runs, in order), the
        records of checkpoint ``n`` onwards; returns the index of the next checkpoint's records."""
        import os
        import shutil

        keys = size["keys"]
        cache = os.environ.get("LOCKSTEP_STATE_CACHE")
        runs: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(1, self.s.restores + 1):
            for temperature in TEMPERATURES:
                if temperature == "restarted" and self.restart_connect is None:
                    continue  # without a restart it would be the warm checkpoint again
                want = self.produce(size, n)
                n += 1
                restart: dict[str, float] = {}
                if temperature != "warm":
                    if self.restart_connect is not None:
                        started = time.monotonic()
                        warm_up = temperature != "cold"
                        self.connect_pid = self.restart_connect(warm_up)
                        restart["server_start_s"] = round(time.monotonic() - started, 3)
                        self.log(f"Spark Connect server restarted in {restart['server_start_s']:.1f} s "
                                 f"(pid {self.connect_pid}{', warm-up checkpoints included' if warm_up else ''})")
                    if cache and temperature != "restarted":
                        shutil.rmtree(cache, ignore_errors=True)
                label = f"{keys:,} keys, {temperature}" + (f" {round_}" if self.s.restores > 1 else "")
                runs.setdefault(temperature, []).append({
                    **self.checkpoint(STATEFUL, size["specs"][STATEFUL], self.s.records, label, want=want[STATEFUL]),
                    **restart, "server_restarted": bool(restart), "round": round_})
                self.checkpoint(STATELESS, size["specs"][STATELESS], self.s.records, f"{label} round",
                                want=want[STATELESS])
        size["cold_warm"] = runs
        return n

    def flink_restore(self, size: dict[str, Any], n: int, bucket: str | None = None) -> None:
        """Flink's RocksDB restores of the state the size's topic built (``lockstep_bench.flink_restore``): the
        topic holds ``n`` checkpoints' records after the build-up's; each restore reads the next one's. With
        ``bucket``, all of it again with Flink's checkpoints on S3 (``size["flink_s3"]``), its build-up reading
        the first chain's restores' records too and its restores the checkpoints' after them."""
        from lockstep_bench import flink_restore

        keys, topic = size["keys"], size["topic"]
        held = size["cold_warm"]["warm"][-1]["inner"]["state"]["keys"] if size.get("cold_warm") else None

        def chain(after: int, on_s3: str | None, state_keys: int | None) -> dict[str, Any]:
            return flink_restore.measure(
                self.bootstrap, topic, keys, after, self.s.new_keys,
                [checkpoint_indices(keys, self.s.records, self.s.new_keys, after + j, self.s.touched)
                 for j in range(self.s.restores)],
                lambda indices: produce(self.bootstrap, topic, indices, self.s.partitions), self.s.partitions,
                self.work_dir, self.log, state_keys=state_keys, on_s3=on_s3)

        size["flink"] = chain(n, None, held)
        if bucket:
            size["flink_s3"] = chain(n + self.s.restores, f"s3://{bucket}/bench-flink-checkpoints",
                                     None if held is None else held + self.s.restores * self.s.new_keys)

    def measure(self) -> list[dict[str, Any]]:
        """Every size built up first (the first build-ups warm the Connect server), then the measured
        checkpoints interleaved over the sizes (``schedule``), so that the machine's noise over time is
        shared by every size as it is by the two pipelines."""
        sizes: list[dict[str, Any]] = []
        try:
            for keys in self.s.keys:
                sizes.append(self.build(keys))
            for n, index, stateful_first in schedule(len(sizes), self.s.checkpoints):
                self.round(sizes[index], n, stateful_first)
            largest = max(sizes, key=lambda size: size["keys"])
            after = self.cold_and_warm(largest, self.s.checkpoints)
            if self.s.flink:  # after every Lockstep checkpoint: the topic then holds what Lockstep's state read
                self.flink_restore(largest, after, self.bucket if self.s.flink_s3 else None)
            return [{k: v for k, v in size.items() if k != "specs"} for size in sizes]
        finally:
            for size in sizes:
                for kind in (STATEFUL, STATELESS):
                    for t in (f"{size['topic']}-{kind}-out", f"{size['topic']}-{kind}-out-dlq"):
                        workloads.delete_topic(self.bootstrap, t)
                workloads.delete_topic(self.bootstrap, size["topic"])


def schedule(sizes: int, checkpoints: int) -> list[tuple[int, int, bool]]:
    """The measured checkpoints in the order they run, as (checkpoint n, size index, stateful first):
    round n visits every size, starting n places further along, and each size's pair alternates which
    pipeline goes first from one round to the next."""
    return [(n, (n + i) % sizes, (n + (n + i) % sizes) % 2 == 0) for n in range(checkpoints) for i in range(sizes)]
