"""Running one competitor: wall time, peak memory and CPU of its whole process tree, and stats."""
from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lockstep_bench.pipelines import Command


@dataclass
class Run:
    """One timed run of one competitor."""

    pipeline: str
    records: int
    partitions: int
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    inner: dict[str, Any] = field(default_factory=dict)  # what the helper measured itself
    repeat: int = 0
    #: its sink read back after the run (``lockstep_bench.sink_check.SinkCheck.to_json``); None: not read
    sink: dict[str, Any] | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1)}


class TreeSampler:
    """Samples the summed RSS (and CPU time) of a process and all its descendants.

    psutil when installed, else ``/proc``. Short-lived children between two samples are missed,
    so the peak is a lower bound; 100 ms sampling catches the Spark JVM and its Python workers.
    """

    def __init__(self, pid: int, interval_s: float = 0.1, shared: tuple[int, ...] = ()) -> None:
        """``shared``: long-lived processes the run uses (a Spark Connect server) and whose trees
        count as the run's too: their CPU from the start of sampling, their RSS in the peak."""
        self.pid = pid
        self.interval_s = interval_s
        self.peak_rss = 0
        self._cpu: dict[int, float] = {}
        self._shared = shared
        self._baseline: dict[int, float] = {}
        for root in shared:
            try:
                self._baseline.update({p: cpu for p, (_mem, cpu) in _tree(root).items()})
            except Exception:  # noqa: BLE001 - gone: nothing to subtract
                pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def cpu_s(self) -> float:
        return sum(cpu - self._baseline.get(pid, 0.0) for pid, cpu in self._cpu.items())

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                rss = 0
                trees = {}
                for root in (self.pid, *self._shared):
                    trees.update(_tree(root))
                for pid, (mem, cpu) in trees.items():
                    rss += mem
                    self._cpu[pid] = max(cpu, self._cpu.get(pid, 0.0))
                self.peak_rss = max(self.peak_rss, rss)
            except Exception:  # noqa: BLE001 - the tree changes under us; next sample
                pass
            self._stop.wait(self.interval_s)


def _tree(pid: int) -> dict[int, tuple[int, float]]:
    """{pid: (rss bytes, cpu seconds)} of ``pid`` and its descendants."""
    try:
        import psutil
    except ImportError:
        return _proc_tree(pid)
    out: dict[int, tuple[int, float]] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in procs:
        try:
            with proc.oneshot():
                cpu = proc.cpu_times()
                out[proc.pid] = (proc.memory_info().rss, cpu.user + cpu.system)
        except psutil.Error:
            continue
    return out


def _proc_tree(pid: int) -> dict[int, tuple[int, float]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    out, todo = {}, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            with open(f"/proc/{current}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{current}/statm") as f:
                rss_pages = int(f.read().split()[1])
            out[current] = (rss_pages * page, (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, IndexError, ValueError):
            continue
    return out


class RunFailed(RuntimeError):
    pass


def execute(name: str, command: Command, records: int, partitions: int, timeout_s: float = 3600,
            repeat: int = 0) -> Run:
    """Start the command, sample its tree until it exits, and return the timed run."""
    started = time.monotonic()
    proc = subprocess.Popen(command.argv, env=command.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with TreeSampler(proc.pid, shared=command.shared_pids) as sampler:
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
            raise RunFailed(f"{name}: timed out after {timeout_s:.0f} s; last output:\n{stdout[-3000:]}") from None
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RunFailed(f"{name}: exit code {proc.returncode}; last output:\n{stdout[-4000:]}")
    inner = command.parse(stdout) if command.parse else {}
    return Run(name, records, partitions, round(wall, 3), round(sampler.peak_rss / 2**20, 1),
               round(sampler.cpu_s, 2), inner, repeat)


def median(values: Sequence[float | None]) -> float:
    """The median of the values present (None: not measured); NaN when none is."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


def page_summary(page: Path, mark: str) -> dict[str, Any] | None:
    """The headline figures a focused bench's page carries after ``mark`` (an HTML comment holding JSON), as its
    report wrote them; None without a page, or a page without them."""
    import json

    try:
        text = page.read_text()
    except OSError:
        return None
    at = text.rfind(mark)
    if at < 0:
        return None
    try:
        return dict(json.loads(text[at + len(mark):].split(" -->", 1)[0]))
    except ValueError:
        return None


def replace_section(report: Path, heading: str, block: str) -> None:
    """``report``'s (docs/BENCHMARKS.md's) section under ``heading`` replaced by ``block``, the rest as it was; put
    before *Making Lockstep faster* when it has none (a focused bench's section, written again by its run)."""
    import re

    text = report.read_text() if report.exists() else ""
    block = block.rstrip("\n") + "\n\n"
    found = re.search("^" + re.escape(heading) + "$", text, re.MULTILINE)
    if found is not None:
        after = text.find("\n## ", found.end())
        report.write_text(text[:found.start()] + block + (text[after + 1:] if after >= 0 else ""))
        return
    anchor = text.find("\n## Making Lockstep faster")
    at = anchor + 1 if anchor >= 0 else len(text)
    report.write_text(text[:at] + block + text[at:])


def load_at(results: dict[str, Any], when: str) -> str:
    """A focused bench's 1-minute load average at ``when`` ("start" or "end"), as a report prints it."""
    load = results.get("load", {}).get(when)
    return f"{load[0]:.2f}" if load else "?"


@dataclass
class Summary:
    """Medians over the repeats of one competitor."""

    pipeline: str
    runs: int
    records_per_s: float
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    stage_records_per_s: float | None = None  # Spark stage alone / the tool's own figure
    spread: float = 0.0  # (max - min) / median of records/s
    sink_checked: int = 0  # runs whose sink was read back
    sink_exact: int = 0  # ... and held exactly what it should

    @classmethod
    def of(cls, runs: list[Run], stage_key: str | None = None) -> Summary:
        rates = [r.records_per_s for r in runs]
        stage = None
        if stage_key is not None:
            stage_rates = [r.records / r.inner[stage_key] if r.inner.get(stage_key) else r.inner.get("tool_records_per_s")
                           for r in runs]
            stage_rates = [s for s in stage_rates if s]
            stage = median(stage_rates) if stage_rates else None
        mid = median(rates)
        return cls(runs[0].pipeline, len(runs), mid, median([r.wall_s for r in runs]),
                   median([r.peak_rss_mb for r in runs]), median([r.cpu_s for r in runs]), stage,
                   (max(rates) - min(rates)) / mid if mid else 0.0,
                   sum(1 for r in runs if r.sink is not None), sum(1 for r in runs if r.sink and r.sink.get("exact")))
