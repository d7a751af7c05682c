"""Writes docs/BENCHMARKS-state.md from the results of ``lockstep bench --state-only``
(``lockstep_bench.keyed_state``): a table per state size and a reading of the numbers.

The arithmetic (bytes per key, what state adds to a checkpoint, medians, growth) is kept apart from
the Markdown so that it can be checked on its own."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockstep_bench.measure import median

STATEFUL, STATELESS = "stateful", "stateless"  # as lockstep_bench.keyed_state names the two pipelines
COMMAND = "make bench-state"
#: What ``make bench-state`` runs (the Makefile's target).
FULL_COMMAND = "lockstep bench --state-only --results var/bench/state-results.json --report docs/BENCHMARKS-state.md"
STEPS = ("watermark_seconds", "load_seconds", "apply_seconds", "write_seconds")


# ---- arithmetic ------------------------------------------------------------------------------------
def bytes_per_key(size_bytes: float | None, keys: float | None) -> float | None:
    """The state's bytes on S3 per key it holds; None without keys."""
    if size_bytes is None or not keys:
        return None
    return size_bytes / keys


def added(stateful_s: float | None, stateless_s: float | None) -> tuple[float | None, float | None]:
    """What state adds to a checkpoint: (stateful − stateless seconds, stateful ÷ stateless)."""
    if stateful_s is None or stateless_s is None or math.isnan(stateful_s) or math.isnan(stateless_s):
        return None, None
    return stateful_s - stateless_s, (stateful_s / stateless_s if stateless_s > 0 else None)


def checkpoint_figures(round_: dict[str, Any]) -> dict[str, Any]:
    """One measured round (the stateful and the stateless pipeline's checkpoint over the same records)
    as the report's figures. ``spark_rest`` is the Spark time the manifest does not split: the output's
    stage (the join with the state, the Kafka transactions) and the session's own work."""
    sf, sl = round_[STATEFUL], round_[STATELESS]
    inner, state = sf["inner"], sf["inner"]["state"]
    metrics = state.get("metrics", {})
    steps = {name: float(metrics.get(name, 0.0)) for name in STEPS}
    spark = float(inner["spark_seconds"])
    total, base_total = float(inner["total_s"]), float(sl["inner"]["total_s"])
    more, ratio = added(total, base_total)
    spark_more, spark_ratio = added(spark, float(sl["inner"]["spark_seconds"]))
    cpu_more, cpu_ratio = added(float(sf["cpu_s"]), float(sl["cpu_s"]))
    return {
        "keys": state["keys"], "rows": state["rows"], "files": state["files"], "bytes": state["bytes"],
        "deltas": state.get("deltas"), "groups_read": metrics.get("groups_read"),
        "rows_loaded": metrics.get("rows_loaded"), "files_written": metrics.get("files_written"),
        "bytes_written": metrics.get("bytes_written"), "compactions": metrics.get("compactions"),
        "delta_bytes": metrics.get("delta_bytes"), "compaction_bytes": metrics.get("compaction_bytes"),
        "bytes_per_key": bytes_per_key(state["bytes"], state["keys"]),
        "watermark_s": steps["watermark_seconds"], "load_s": steps["load_seconds"],
        "apply_s": steps["apply_seconds"], "write_s": steps["write_seconds"],
        "state_s": steps["load_seconds"] + steps["apply_seconds"] + steps["write_seconds"],
        "spark_rest_s": spark - sum(steps.values()),
        "spark_s": spark, "total_s": total, "process_s": float(sf["wall_s"]),
        "base_spark_s": float(sl["inner"]["spark_seconds"]), "base_total_s": base_total,
        "base_process_s": float(sl["wall_s"]),
        "cpu_s": float(sf["cpu_s"]), "base_cpu_s": float(sl["cpu_s"]),
        "added_s": more, "ratio": ratio, "spark_added_s": spark_more, "spark_ratio": spark_ratio,
        "cpu_added_s": cpu_more, "cpu_ratio": cpu_ratio,
    }


def size_summary(size: dict[str, Any]) -> dict[str, Any]:
    """The medians of one state size's measured checkpoints; ``added`` and ``ratio`` from the medians."""
    rows = [checkpoint_figures(r) for r in size["checkpoints"]]
    out: dict[str, Any] = {"keys_built": size["keys"], "checkpoints": len(rows)}
    for name in rows[0] if rows else ():
        if name in ("added_s", "ratio", "spark_added_s", "spark_ratio", "cpu_added_s", "cpu_ratio"):
            continue
        values = [r[name] for r in rows if r[name] is not None]
        out[name] = median(values) if values else None
    out["added_s"], out["ratio"] = added(out.get("total_s"), out.get("base_total_s"))
    out["spark_added_s"], out["spark_ratio"] = added(out.get("spark_s"), out.get("base_spark_s"))
    out["cpu_added_s"], out["cpu_ratio"] = added(out.get("cpu_s"), out.get("base_cpu_s"))
    return out


def growth(small: dict[str, Any], large: dict[str, Any], key: str) -> float | None:
    """How many times ``key`` grew from the smaller state size's summary to the larger's."""
    a, b = small.get(key), large.get(key)
    if a is None or b is None or not a:
        return None
    return float(b / a)


# ---- Markdown --------------------------------------------------------------------------------------
def read_back(sizes: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Of the checkpoints (each size's build-ups and rounds, and the cold and warm ones), how many ran, how many
    had their outputs read back, and how many of those were exact (`lockstep_bench.keyed_state.wanted_outputs`)."""
    runs = [run for size in sizes for run in size.get("buildup", [])]
    runs += [run for size in sizes for round_ in size.get("checkpoints", []) for run in round_.values()]
    runs += [run for size in sizes if size.get("cold_warm") for t in _temperatures(size) for run in runs_of(size, t)]
    checked = [run["sink"] for run in runs if run.get("sink")]
    return len(runs), len(checked), sum(1 for c in checked if c.get("exact"))


def _s(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _ratio(value: float | None, of: float | None) -> float | None:
    return None if value is None or not of else value / of


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _bytes(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value / 2**10:,.1f} KiB" if value >= 2**10 \
        else f"{value:,.0f} B"


def _load(values: Any) -> str:
    return "/".join(f"{v:.1f}" for v in values) if values else "?"


def render(results: dict[str, Any], rerendered: bool = False) -> str:
    s, env = results["settings"], results.get("environment", {})
    sizes = results.get("sizes", [])
    summaries = [size_summary(size) for size in sizes]
    lines: list[str] = []
    add = lines.append
    add("# Benchmarks: what keyed state costs")
    add("")
    add(f"Generated by `{COMMAND}` (`{FULL_COMMAND}`; `lockstep bench --state-only --help` for its options), "
        f"on {results.get('started_at', '?')} at commit `{results.get('commit', '?')}`, in "
        f"{results.get('seconds', 0) / 60:.1f} minutes. Do not edit it by hand: run the command again. Every figure "
        "comes from that one run on an isolated local platform (Kafka broker, S3 server and Spark Connect server "
        "started by the benchmark). The machine is shared and noisy: absolute seconds drift between runs; the "
        "stateful and the stateless pipeline are measured side by side, over the same records, taking turns "
        "to go first, so what state adds holds better than either figure alone. "
        "[BENCHMARKS.md](BENCHMARKS.md) has the stateless benchmark; [state.md](state.md) explains the model.")
    add("")
    add("## Machine and versions")
    add("")
    add("| | |")
    add("| --- | --- |")
    for key, label in (("cpus", "CPUs (nproc)"), ("cpu_model", "CPU"), ("memory", "memory"), ("kernel", "Linux"),
                       ("java", "Java"), ("kafka", "Kafka"), ("spark", "Spark (pyspark)"), ("python", "Python"),
                       ("pyarrow", "pyarrow")):
        add(f"| {label} | {env.get(key, '?')} |")
    load = results.get("load", {})
    add(f"| load average (1/5/15 min) at start / end | {_load(load.get('start'))} / {_load(load.get('end'))} |")
    add("")
    add("## What was measured")
    add("")
    add(f"- **State sizes:** {', '.join(f'{k:,}' for k in s['keys'])} keys, each with an input topic of "
        f"{s['partitions']} partitions and two pipelines of its own, in connect mode (each checkpoint a session on "
        "the platform's Spark Connect server, `local[*]`).")
    add(f"- **Stateful pipeline:** `lockstep_examples.orders:parse` with `state: {{key_groups: {s['key_groups']}, "
        "event_time: {column: created_at, out_of_orderness: 10s}, dedup: {key: order_id, ttl: 400d, "
        "duplicates: dead_letter}}`. Dedup rather than windows: its state is one row per distinct key (the key, "
        "its key group and its first event time), so the state's bytes divided by its keys is what a key costs "
        "on S3, and its keys are exactly the distinct order ids produced. A window's state would be the rows of "
        "the windows that have not fired, more than one per key.")
    add("- **Stateless baseline:** `lockstep_examples.orders:enrich` (parse, validate, enrich; no state) over the "
        "same topic, in the same run.")
    add("- **Build-up:** K distinct orders (`lockstep_dev.datagen.order(i)`, about 200 bytes), read by both "
        "pipelines in one checkpoint (`max_records` is at least K); the state then holds K keys. Not counted.")
    touched = s.get("touched", 1.0)
    add(f"- **Measured:** {s['checkpoints']} checkpoints per size, each over {s['records']:,} new records: "
        f"{s['records'] - s['new_keys']:,} repeat orders the state holds (cycling over {touched:.0%} of the K keys, "
        "a different slice each checkpoint; they go to "
        f"the dead-letter topic as `duplicate`) and {s['new_keys']:,} are new keys. Both pipelines therefore write "
        "every record they read to Kafka, and the state grows by the new keys only. Every size is built up "
        "before the first measurement; then each round visits every size (starting one size further each "
        "round), producing its records and running one checkpoint of each pipeline, which alternate in going "
        "first. So the machine's noise over time falls on every size and both pipelines alike.")
    add("- **Figures:** _watermark, load, apply, write_ are the state manifest's `metrics` (docs/state.md); _rest_ "
        "is the run's Spark seconds (`prepared.spark_seconds`) minus those four: the output's stage (for dedup, "
        "with its join against the records the driver judged) and the Kafka transactions. _checkpoint_ = plan + "
        "run + commit, "
        "timed in the process that runs them once it has imported the clients it uses (S3, Kafka, Parquet, Spark "
        "Connect: `lockstep_bench.pipelines.CLIENT_MODULES`); _process_ adds Python start and imports. _bytes_ are "
        "the state's "
        "Parquet files on S3 (zstd); _files_ each key group's chain (a base, then deltas), _deltas_ of them. "
        "_groups read, rows loaded_: the key groups whose files the checkpoint read, and the rows of them it "
        "kept (the touched keys' rows; a dedup judges them on the driver, other operators hand them to Spark); "
        "_files, bytes written_: its deltas and bases on S3, "
        "_compactions_ the chains it merged into a new base.")
    ran, checked, exact = read_back(results.get("sizes", []))
    if checked:
        add(f"- **Outputs read back:** after each checkpoint (the build-ups, every round, and the cold and warm ones), "
            "its sink and dead-letter topic read to their last stable offsets with `read_committed`, from where "
            "they ended before it, and checked record by record by the input offset each output names "
            "(`lockstep_bench.keyed_state.wanted_outputs`, `lockstep_bench.sink_check`): the dedup's sink must "
            "hold exactly the new keys' orders (in a build-up, every order) and its dead-letter topic exactly the "
            "repeats, the stateless pipeline's sink every order, each once. "
            f"**{exact} of {checked} exact**" + (f" ({ran - checked} not read back)." if ran > checked else "."))
    else:
        add("- **Outputs read back:** not in these results (they predate the check): the figures are the "
            "checkpoints' own reports.")
    add("")
    add("## Summary (medians of the measured checkpoints)")
    add("")
    add("| state size | keys | state on S3 | bytes per key | files | rows loaded | bytes written | of which deltas | "
        "of which compactions | load s | apply s | "
        "write s | stateful checkpoint s | stateless checkpoint s | state adds s | stateful ÷ stateless | "
        "Spark s stateful / stateless | CPU s stateful / stateless | state adds CPU s |")
    add("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: |")
    for m in summaries:
        add(f"| {m['keys_built']:,} | {m.get('keys', 0):,.0f} | {_bytes(m.get('bytes'))} | {_s(m.get('bytes_per_key'), 1)} | "
            f"{_s(m.get('files'), 0)} | {_s(m.get('rows_loaded'), 0)} | {_bytes(m.get('bytes_written'))} | "
            f"{_bytes(m.get('delta_bytes'))} | {_bytes(m.get('compaction_bytes'))} | "
            f"{_s(m.get('load_s'))} | {_s(m.get('apply_s'))} | {_s(m.get('write_s'))} | "
            f"{_s(m.get('total_s'))} | {_s(m.get('base_total_s'))} | {_signed(m.get('added_s'))} | "
            f"{_x(m.get('ratio'))} | {_s(m.get('spark_s'))} / {_s(m.get('base_spark_s'))} | "
            f"{_s(m.get('cpu_s'), 1)} / {_s(m.get('base_cpu_s'), 1)} | {_signed(m.get('cpu_added_s'))} |")
    add("")
    add("_state size_: the keys built up before the measured checkpoints; _keys_: what the state held after them "
        "(median), with each checkpoint's new keys. _CPU s_: user + system seconds of the checkpoint's process "
        "and of the Spark Connect server during it. On a shared machine a checkpoint's wall time also counts "
        "the time it waited for a core; its CPU seconds do not, so they vary less from run to run.")
    add("")
    for size, m in zip(sizes, summaries):
        _size_table(add, size, m)
    _cold_warm(add, sizes)
    _reading(add, summaries, s)
    add("## Notes")
    add("")
    for note in results.get("notes", []):
        add(f"- {note}")
    if rerendered:
        add("- This page was rendered again from the run's saved results (`lockstep bench --state-only "
            "--from-results`); every figure is from the run itself.")
    add(f"- Raw results: `{s.get('results') or 'results.json in the platform folder'}`.")
    add("")
    return "\n".join(lines)


def _size_table(add: Any, size: dict[str, Any], m: dict[str, Any]) -> None:
    add(f"## {size['keys']:,} keys")
    add("")
    build = {r["pipeline"]: r for r in size.get("buildup", [])}
    if STATEFUL in build and STATELESS in build:
        add(f"Build-up, not counted: {size['keys']:,} records in one checkpoint, stateful "
            f"{_s(build[STATEFUL]['inner']['total_s'])} s (Spark {_s(build[STATEFUL]['inner']['spark_seconds'])} s), "
            f"stateless {_s(build[STATELESS]['inner']['total_s'])} s "
            f"(Spark {_s(build[STATELESS]['inner']['spark_seconds'])} s).")
        add("")
    add("| checkpoint | keys | rows | files | deltas | bytes | B/key | groups read | rows loaded | files written | "
        "bytes written | compactions | watermark s | load s | apply s | write s | rest s | "
        "Spark s | checkpoint s | process s | CPU s | stateless Spark s | stateless checkpoint s | stateless CPU s | "
        "state adds s | ratio |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = [(str(n + 1), checkpoint_figures(r)) for n, r in enumerate(size["checkpoints"])]
    for label, f in [*rows, ("median", m)]:
        add(f"| {label} | {f['keys']:,.0f} | {f['rows']:,.0f} | {f['files']:,.0f} | {_s(f.get('deltas'), 0)} | "
            f"{f['bytes']:,.0f} | {_s(f['bytes_per_key'], 1)} | {_s(f.get('groups_read'), 0)} | "
            f"{_s(f.get('rows_loaded'), 0)} | {_s(f.get('files_written'), 0)} | {_s(f.get('bytes_written'), 0)} | "
            f"{_s(f.get('compactions'), 0)} | "
            f"{_s(f['watermark_s'])} | {_s(f['load_s'])} | {_s(f['apply_s'])} | "
            f"{_s(f['write_s'])} | {_s(f['spark_rest_s'])} | {_s(f['spark_s'])} | {_s(f['total_s'])} | "
            f"{_s(f['process_s'])} | {_s(f['cpu_s'], 1)} | {_s(f['base_spark_s'])} | {_s(f['base_total_s'])} | "
            f"{_s(f['base_cpu_s'], 1)} | {_signed(f['added_s'])} | {_x(f['ratio'])} |")
    add("")


def _cold_warm(add: Any, sizes: list[dict[str, Any]]) -> None:
    measured = [size for size in sizes if size.get("cold_warm")]
    if not measured:
        return
    size = measured[-1]
    restarted = runs_of(size, "cold")[0].get("server_restarted", False)
    add(f"## Cold and warm, at {size['keys']:,} keys")
    add("")
    add("A checkpoint reads the files of the key groups its records touch; each host keeps them decoded in a local "
        "cache addressed by their content digest (docs/state.md, *What state costs*). _Cold_: "
        + ("the Spark Connect server restarted (a new JVM; _server start_ is its stop and start until it serves, "
           "with its one warm-up query) and the cache emptied before the checkpoint, as a restore's first "
           "checkpoint on a new host; " if restarted else
           "the cache emptied before the checkpoint, as on a host that never ran the pipeline (the Spark Connect "
           "server stays up); ")
        + ("_cold, server warmed up_: the same, on a server that ran the platform's warm-up checkpoints when it "
           "started (`lockstep_dev.warm_checkpoints`: real checkpoints of a stateless, a dedup and a windowed "
           "pipeline, `ROUNDS` times, their records, state and topics their own; _server start_ includes them), the cache "
           "emptied after them; " if "warmed" in size["cold_warm"] else "")
        + (f"_{LABELS['restarted']}_: a restore on the same host, the server restarted and warmed up again and the "
           "cache as the checkpoint before it left it (the cache lives on the host of the run step, which a "
           "server's restart does not touch; Flink's restore below reads its checkpoint from the local disk too); "
           if "restarted" in size["cold_warm"] else "")
        + "_warm_: the next checkpoint, with the server and the cache as the one before it left them.")
    add("")
    rounds = max(len(runs_of(size, t)) for t in _temperatures(size))
    if rounds > 1:
        kinds = _temperatures(size)
        add(f"Each of these {len(kinds)} ran {rounds} times, in rounds ({'; '.join(LABELS[t] for t in kinds)}; then "
            "again): a row is the median run by its checkpoint seconds, _each run_ every run's, in the order they ran.")
        add("")
    add("| checkpoint | server start s | groups read | rows loaded | load s | apply s | write s | Spark s | "
        "checkpoint s | process s | CPU s | each run s |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for temperature in _temperatures(size):
        runs = runs_of(size, temperature)
        run = median_run(runs)
        inner = run["inner"]
        metrics = inner.get("state", {}).get("metrics", {})
        add(f"| {LABELS[temperature]} | {_s(run.get('server_start_s'))} | {_s(metrics.get('groups_read'), 0)} | "
            f"{_s(metrics.get('rows_loaded'), 0)} | "
            f"{_s(metrics.get('load_seconds'))} | {_s(metrics.get('apply_seconds'))} | "
            f"{_s(metrics.get('write_seconds'))} | {_s(inner.get('spark_seconds'))} | {_s(inner.get('total_s'))} | "
            f"{_s(run.get('wall_s'))} | {_s(run.get('cpu_s'), 1)} | "
            f"{', '.join(_s(r['inner'].get('total_s')) for r in runs)} |")
    add("")
    if size.get("flink"):
        _against_flink(add, size)


#: The restore's checkpoints (`lockstep_bench.keyed_state.TEMPERATURES`) as the report names them.
LABELS = {"cold": "cold", "warmed": "cold, server warmed up", "restarted": "same host, server restarted",
          "warm": "warm"}
#: Which of them restore on a new host (an empty cache), and on the same host (the cache kept).
NEW_HOST = ("cold", "warmed")
SAME_HOST = ("restarted",)


def _temperatures(size: dict[str, Any]) -> list[str]:
    """The restore's checkpoints a size's results hold, in the order they ran (results written before the
    warmed-up one have cold and warm only)."""
    return [t for t in LABELS if t in size["cold_warm"]]


def runs_of(size: dict[str, Any], temperature: str) -> list[dict[str, Any]]:
    """A restore checkpoint's runs, in the order they ran (results written before the repeated restores hold
    one run, not a list)."""
    runs = size["cold_warm"][temperature]
    return runs if isinstance(runs, list) else [runs]


def median_run(runs: list[dict[str, Any]], seconds: Callable[[dict[str, Any]], float | None] = lambda run:
               run["inner"].get("total_s")) -> dict[str, Any]:
    """The run whose ``seconds`` are the median (of an even number, the faster of the middle two): a real
    run, so that every figure of its row comes from one checkpoint."""
    timed = sorted((run for run in runs if seconds(run) is not None), key=lambda run: seconds(run) or 0.0)
    return timed[(len(timed) - 1) // 2] if timed else runs[0]


def flink_restores(flink: dict[str, Any]) -> list[dict[str, Any]]:
    """Flink's restores, in the order they ran (results written before the repeated restores hold one)."""
    return list(flink.get("restores") or ([flink["restore"]] if flink.get("restore") else []))


#: The comparison's Flink rows: its checkpoints on the local disk (the restore reads them there), and on S3
#: (the restore downloads them, as a Flink on a new host does; ``flink_s3``, when it ran).
FLINK_LOCAL, FLINK_S3 = "Flink, restore", "Flink, restore from S3"


def _flink_seconds(restore: dict[str, Any]) -> float | None:
    return restore.get("from_job_started_s")


def restore_rows(size: dict[str, Any]) -> list[dict[str, Any]]:
    """Lockstep's cold and warm checkpoints and Flink's restore as the comparison's rows, each its median run:
    seconds to the first completed checkpoint over the new records, without and with the process's (and a
    restarted server's) start, the records in, the state's bytes (S3 for Lockstep, local disk for Flink);
    ``runs``: every run's seconds to the first completed checkpoint."""
    rows = []
    for temperature in _temperatures(size):
        runs = runs_of(size, temperature)
        run = median_run(runs)
        inner = run["inner"]
        wall = run.get("wall_s")
        start = run.get("server_start_s")
        rows.append({"name": f"Lockstep, {LABELS[temperature]}", "records_in": inner.get("records_in"),
                     "seconds": inner.get("total_s"),
                     "with_start_s": None if wall is None else wall + (start or 0.0),
                     "bytes": (inner.get("state") or {}).get("bytes"), "cpu_s": run.get("cpu_s"),
                     "runs": [r["inner"].get("total_s") for r in runs]})
    for key, name in (("flink", FLINK_LOCAL), ("flink_s3", FLINK_S3)):
        if not size.get(key):
            continue
        restores = flink_restores(size[key])
        restore = median_run(restores, _flink_seconds)
        rows.append({"name": name, "records_in": restore.get("records_in"),
                     "seconds": _flink_seconds(restore), "with_start_s": restore.get("seconds"),
                     "bytes": restore.get("checkpoint_bytes"), "cpu_s": restore.get("cpu_s"),
                     "runs": [_flink_seconds(r) for r in restores]})
    return rows


def _against_flink(add: Any, size: dict[str, Any]) -> None:
    flink = size["flink"]
    build, restores = flink["buildup"], flink_restores(flink)
    restore = median_run(restores, _flink_seconds)
    check = restore.get("check", {})
    add("### Against Flink's RocksDB restore of the same state")
    add("")
    add("Flink SQL (`include/lockstep_bench/jobs/flink_restore_job.py`) runs the same dedup: the first order of each "
        "`order_id` (`ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY proc_time ASC) = 1`, state TTL 400 days) from "
        "an unbounded Kafka source, read_committed, into an exactly-once Kafka sink; RocksDB state "
        f"({flink.get('managed_memory', '128m')} of managed memory), incremental checkpoints to local disk every "
        f"{_s(flink.get('buildup_checkpoint_s', flink.get('checkpoint_s')), 0)} s in the build-up and every "
        f"{_s(flink.get('checkpoint_s'), 0)} s in the restore, retained when the job is cancelled; "
        f"parallelism {build.get('result', {}).get('parallelism', '?')}. It reads this size's own topic from the "
        "start, so its state holds the keys Lockstep's holds. Then a new Flink process restores the retained "
        f"checkpoint (`execution.state-recovery.path`, claim mode {flink.get('claim_mode', '?')}) and reads a "
        "checkpoint's worth of new records of the same kind as the cold checkpoint's (repeats of held keys and new "
        "keys)"
        + (f"; {len(restores)} times, each restore a new process from the checkpoint the one before it retained "
           "(the whole state each time, with the previous restore's new keys)" if len(restores) > 1 else "")
        + ". The build-up ends when Flink's consumer group's committed offsets (committed when a checkpoint "
        "completes) reach the topic's end offsets; the restore, when its output of the new keys is committed."
        + (" Then all of it again with Flink's checkpoints on the benchmark's S3 server (the `flink-s3-fs-hadoop` "
           "plugin), as a production Flink keeps them: a new build-up over the same topic, and restores each of "
           "which downloads the state before it runs, as Lockstep's restore on a new host does "
           "(_Flink, restore from S3_). Its build-up also read the first chain's restores' records, and its "
           "restores the checkpoints' after those." if size.get("flink_s3") else ""))
    add("")
    repeated = len(restores) > 1 or any(len(runs_of(size, t)) > 1 for t in _temperatures(size))
    if repeated:
        add("Each row is its median run (by the seconds to the first completed checkpoint); _each run_ lists every "
            "run's, in the order they ran; the ratios are of the medians.")
        add("")
    add("| run | records in | to the first completed checkpoint s | ÷ Flink's | with the process (and server) start s "
        "| ÷ Flink's | state bytes | CPU s | each run s |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = restore_rows(size)
    flink_row = next(r for r in rows if r["name"] == FLINK_LOCAL)
    s3_row = next((r for r in rows if r["name"] == FLINK_S3), None)
    mine = [r for r in rows if r["name"].startswith("Lockstep")]
    for row in rows:
        add(f"| {row['name']} | {_n(row['records_in'])} | {_s(row['seconds'])} | "
            f"{_x(_ratio(row['seconds'], flink_row['seconds']))} | {_s(row['with_start_s'])} | "
            f"{_x(_ratio(row['with_start_s'], flink_row['with_start_s']))} | {_bytes(row['bytes'])} | "
            f"{_s(row['cpu_s'], 1)} | {', '.join(_s(v) for v in row['runs'])} |")
    add("")
    verdicts = []
    comparisons = [("on a new host (the cache empty)", NEW_HOST, flink_row, "Flink's restore from its local disk"),
                   ("on the same host (the server restarted, the cache kept)", SAME_HOST, flink_row,
                    "Flink's restore from its local disk")]
    if s3_row is not None:
        comparisons.append(("on a new host (the cache empty)", NEW_HOST, s3_row,
                            "Flink's restore from S3 (like for like: both download the state)"))
    for where, temperatures, against, against_name in comparisons:
        names = {f"Lockstep, {LABELS[t]}" for t in temperatures}
        best = min((r for r in mine if r["name"] in names and r["seconds"] is not None),
                   key=lambda r: r["seconds"], default=None)
        ratio = None if best is None else _ratio(best["seconds"], against["seconds"])
        if best is not None and ratio is not None:
            verdicts.append(f"{where}, {best['name']}, against {against_name}, {_x(ratio)} to the first completed "
                            "checkpoint: " + ("**met**" if ratio <= 1.0 else "**not met**"))
    if verdicts:
        add("**The restore against Flink's** (issue 44's target: a cold restore at or below Flink's time, 1.0×"
            + (", median against median" if repeated else "") + "): "
            + "; ".join(verdicts) + ". A warm checkpoint is no restore and is not counted.")
        add("")
    add("_to the first completed checkpoint_: Lockstep, the checkpoint's plan + run + commit (in its process, "
        "Python start and imports excluded, the S3, Kafka, Parquet and Spark Connect clients' among them: "
        "`lockstep_bench.pipelines.import_clients`); Flink, from the job's submission (the JVM and the local mini-cluster "
        "up, the SQL planned) until all its output of the new keys is committed in Kafka, visible under "
        "read_committed: the state restored, the records read, a checkpoint covering them completed and its "
        "transactions committed (the new keys are every partition's last records; the next checkpoint trigger "
        f"comes at most {_s(flink.get('checkpoint_s'), 0)} s after the previous one). _with the process (and server) start_: "
        "Lockstep, the checkpoint's process from its start, plus, cold, the Spark Connect server's restart; Flink, "
        "from its process's start. _state bytes_: Lockstep, the state's files on S3 after the checkpoint; Flink, "
        "its checkpoints' files on local disk" + (" (on S3 for _Flink, restore from S3_)" if s3_row else "")
        + " after its checkpoint (the build-up's retained checkpoint and the restored job's, which share files). "
        "_CPU s_: Lockstep, the checkpoint's process and the Spark Connect server during it; Flink, its process tree "
        "from its start until the time in the table.")
    add("")
    result = build.get("result", {})
    latest = (result.get("checkpoints") or {}).get("latest_completed") or {}
    held = build.get("lockstep_state_keys")
    same = held is not None and build.get("output_records") == held == build.get("expected_output")
    add(f"- **Flink's build-up, not counted:** {build.get('records_in', 0):,} records to a completed checkpoint in "
        f"{_s(build.get('seconds'), 1)} s from the process start ({_s(build.get('from_job_started_s'), 1)} s from the "
        f"job's submission; CPU {_s(build.get('cpu_s'), 0)} s). Its dedup emitted {build.get('output_records', 0):,} "
        f"orders, one per distinct order id: "
        + (f"as many as Lockstep's state holds keys ({held:,})." if same else
           f"Lockstep's state holds {_n(held)} keys and "
           f"{build.get('expected_output', 0):,} distinct orders were produced.")
        + f" Its retained checkpoint: {_bytes(result.get('checkpoint_bytes'))} on disk"
        + (f" (Flink's REST API: state size {_bytes(latest.get('state_size'))})." if latest.get("state_size") else "."))
    restored = (restore.get("result", {}).get("checkpoints") or {}).get("restored") or {}
    offsets = restore.get("offsets_seconds")
    if len(restores) > 1:
        ids = [((r.get("result", {}).get("checkpoints") or {}).get("restored") or {}).get("id") for r in restores]
        exact = sum(1 for r in restores if (r.get("check") or {}).get("exact"))
        add(f"- **Flink's {len(restores)} restores:** {', '.join(_s(_flink_seconds(r)) for r in restores)} s from the "
            "job's submission to the new keys' output committed"
            + (f", restoring checkpoints {', '.join(str(i) for i in ids)} (Flink's REST API)" if all(ids) else "")
            + f"; each one's output exactly the new keys: {exact} of {len(restores)}.")
    add(f"- **Flink's {'median ' if len(restores) > 1 else ''}restore:** the job was submitted "
        f"{_s(restore.get('job_started_s'), 1)} s after its process started"
        + (f" and restored checkpoint {restored.get('id')} (Flink's REST API)" if restored else "")
        + (f"; its group's committed offsets reached the end offsets {_s(offsets)} s after the process start (Flink's "
           "Kafka source commits them from its fetcher thread, which waits in a 10 s poll once the partitions are "
           "drained, so they trail the checkpoint; not the clock here)"
           if offsets is not None and restore.get("clock") == "outputs committed" else "")
        + f". Its output: {check.get('emitted', 0):,} orders for {check.get('expected', 0):,} new keys"
        + (", exactly the new keys: none of the repeats emitted again, so the state was restored."
           if check.get("exact") else
           f": NOT exact, {check.get('missing', 0):,} new keys missing, {check.get('duplicated', 0):,} emitted twice, "
           f"{check.get('repeats_emitted', 0):,} held keys emitted again, {check.get('unknown', 0):,} others.")
        + " (Lockstep's checkpoints write every record they read: the first of each order to the sink, the "
        "repeats to the dead-letter topic.)")
    add("- **What favours Flink here:** its keep-first-row dedup on processing time keeps one flag per key, where "
        "Lockstep keeps each key's first event time; it drops the repeats instead of writing them to a dead-letter "
        "topic; its checkpoints go to the local disk, Lockstep's state to the S3 server"
        + (" (except in the restore from S3)" if size.get("flink_s3") else "") + "; in claim mode the restored "
        "checkpoint becomes the job's own, so its first checkpoint after the restore is incremental.")
    add("")


def _reading(add: Any, summaries: list[dict[str, Any]], s: dict[str, Any]) -> None:
    add("## Reading the numbers")
    add("")
    if not summaries:
        add("No state size was measured.")
        add("")
        return
    large = max(summaries, key=lambda m: m.get("keys") or 0)
    spark = large.get("spark_s") or 0.0
    parts = {"watermark (the first action on the checkpoint's input: it reads the records from Kafka and runs the "
             "transform, cached for the steps after it; for dedup, the records' keys, event times and provenance "
             "collected to the driver)": large.get("watermark_s"),
             "load (the touched groups' files read from S3 by the driver, the touched keys' rows kept)":
                 large.get("load_s"),
             "apply (for dedup, the driver's judgement of the records against the rows loaded, the passes put "
             "beside them)": large.get("apply_s"),
             "write (the deltas, and any compacted base, written to S3 by the driver)": large.get("write_s"),
             "the rest of Spark (the output's stage, with its join against the passes or the copies the driver "
             "marked, and the Kafka transactions)": large.get("spark_rest_s")}
    ranked = sorted(((v or 0.0, k) for k, v in parts.items()), reverse=True)
    add(f"- **Where the time goes** (at {large.get('keys', 0):,.0f} keys, medians): of the stateful checkpoint's "
        f"{_s(large.get('total_s'))} s, Spark takes {_s(spark)} s: "
        + "; ".join(f"{k} {_s(v)} s" for v, k in ranked) + ". "
        f"The state's own steps, load + apply + write, take {_s(large.get('state_s'))} s "
        f"({_share(large.get('state_s'), large.get('total_s'))} of the checkpoint). Against the stateless "
        f"pipeline over the same records the checkpoint takes {_signed(large.get('added_s'))} s "
        f"({_x(large.get('ratio'))}).")
    if len(summaries) >= 2:
        small = min(summaries, key=lambda m: m.get("keys") or 0)
        keys_x = growth(small, large, "keys")
        add(f"- **How it grows:** from {small.get('keys', 0):,.0f} to {large.get('keys', 0):,.0f} keys "
            f"({_x(keys_x)} the state), load + apply + write went {_s(small.get('state_s'))} → "
            f"{_s(large.get('state_s'))} s ({_x(growth(small, large, 'state_s'))}), the state's bytes "
            f"{_bytes(small.get('bytes'))} → {_bytes(large.get('bytes'))} ({_x(growth(small, large, 'bytes'))}) and "
            f"what state adds to a checkpoint {_signed(small.get('added_s'))} → {_signed(large.get('added_s'))} s, "
            f"while the stateless checkpoint over the same {s['records']:,} records went "
            f"{_s(small.get('base_total_s'))} → {_s(large.get('base_total_s'))} s. Each size's input per checkpoint "
            "is the same, so the growth is the state's. By step: "
            + ", ".join(f"{label} {_s(small.get(key))} → {_s(large.get(key))} s" for key, label in (
                ("load_s", "load"), ("apply_s", "apply"), ("write_s", "write"), ("spark_rest_s", "the rest of Spark")))
            + ". In CPU seconds, which the machine's other load disturbs "
            f"less, the stateful checkpoint went {_s(small.get('cpu_s'), 1)} → {_s(large.get('cpu_s'), 1)} s "
            f"({_x(growth(small, large, 'cpu_s'))}) and the stateless one {_s(small.get('base_cpu_s'), 1)} → "
            f"{_s(large.get('base_cpu_s'), 1)} s.")
        add(f"- **Fixed and growing parts:** already at {small.get('keys_built', 0):,} keys state adds "
            f"{_signed(small.get('added_s'))} s to a checkpoint. That part hardly depends on the state's size: a "
            "stateful run is more work over the same records (for dedup: the records collected narrow to the "
            "driver, which judges them; the output marked by a join; the state's files written). " + _on_top(small, large)
            + f" In CPU seconds state adds {_signed(small.get('cpu_added_s'))} s at {small.get('keys_built', 0):,} keys "
            f"and {_signed(large.get('cpu_added_s'))} s at {large.get('keys_built', 0):,}.")
        add(f"- **Bytes per key:** {_s(small.get('bytes_per_key'), 1)} at {small.get('keys', 0):,.0f} keys, "
            f"{_s(large.get('bytes_per_key'), 1)} at {large.get('keys', 0):,.0f}: each of the "
            f"{s['key_groups']} key groups' files carries a Parquet footer and schema whatever it holds, which "
            "small states pay per key; a large state pays the row itself (key, key group and event time, "
            "compressed).")
    if len(summaries) >= 2:
        small = min(summaries, key=lambda m: m.get("keys") or 0)
        add(f"- **Incremental:** a checkpoint wrote {_bytes(small.get('delta_bytes'))} of deltas at "
            f"{small.get('keys', 0):,.0f} keys and {_bytes(large.get('delta_bytes'))} at {large.get('keys', 0):,.0f} "
            f"(medians), for the {_s(small.get('rows_loaded'), 0)} and {_s(large.get('rows_loaded'), 0)} keys of the "
            f"state it touched (the rows it loaded): in proportion to the keys it changed, not to the state "
            f"({_bytes(small.get('bytes'))} and {_bytes(large.get('bytes'))}). Compactions add "
            f"{_bytes(small.get('compaction_bytes'))} and {_bytes(large.get('compaction_bytes'))} (medians): a "
            "group's base is rewritten at its turn only once its deltas reach 1/max_deltas of it, which a small "
            "state's groups do at every turn and a large state's after many checkpoints; over time about "
            "max_deltas times the deltas (docs/state.md, *The defaults*). What still grows "
            "with the state is the read of the touched groups' files, the load step above (a warm local cache "
            f"makes it a memory map). The checkpoint at {large.get('keys_built', 0):,} keys took "
            f"{_x(growth(small, large, 'total_s'))} its time at {small.get('keys_built', 0):,}.")
    add("")


def _on_top(small: dict[str, Any], large: dict[str, Any]) -> str:
    """What the larger state adds beyond the smaller one's addition (noise can make it negative)."""
    a, b = large.get("added_s"), small.get("added_s")
    if a is None or b is None:
        return ""
    if a - b <= 0:
        return (f"At {large.get('keys_built', 0):,} keys the addition is no larger ({_signed(a - b)} s): the state's "
                "size costs less than the noise between checkpoints here.")
    return f"What the larger state costs on top is the difference, {_signed(a - b)} s at {large.get('keys_built', 0):,} keys."


def _share(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "–"
    return f"{part / whole:.0%}"


def write(results: dict[str, Any], path: Path, rerendered: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rerendered))
