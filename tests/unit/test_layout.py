"""The layout of the code: no import cycles, the engine (``lockstep``) depends on no tool, and the
CLI builds its parser without loading one.

The graph is read from the source, not from ``sys.modules``: every ``import`` / ``from ... import``
statement of a module is an edge, at any depth, so an import inside a function (there to be lazy)
is a dependency all the same. Edges go to the most specific module of ours they name
(``from lockstep_bench import report`` is an edge to ``lockstep_bench.report``); third-party
imports are left out.

The engine's one reference to the tools is ``lockstep.cli.TOOLS``: the ``lockstep`` command fronts
the tools' subcommands, naming each tool's module as a string that is imported only when its
subcommand runs. That is dispatch by name, not an import of tool code by engine code, so it is no
edge of the graph; the tests below check that it is the only place the engine names a tool and
that each name there is a module with the entry points the CLI calls.
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where each top-level package of the project lives.
PACKAGES = {
    "lockstep": ROOT / "include",
    "lockstep_bench": ROOT / "include",
    "lockstep_dev": ROOT / "include",
    "lockstep_soak": ROOT / "include",
    "lockstep_examples": ROOT / "include",
    "lockstep_airflow": ROOT / "plugins",
}
ENGINE = "lockstep"
TOOLS = ("lockstep_bench", "lockstep_dev", "lockstep_soak")


def module_files() -> dict[str, Path]:
    files = {}
    for package, base in PACKAGES.items():
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    files["lockstep_plugin"] = ROOT / "plugins" / "lockstep_plugin.py"
    return files


def _ours(name: str, modules: set[str]) -> str | None:
    """The most specific module of ours that ``name`` is, or is inside of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: set[str]) -> set[str]:
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            # `from package import name` names a submodule when there is one of that name.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(target for target in (_ours(n, modules) for n in names) if target and target != module)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    modules = set(files)
    return {module: imports_of(module, path, modules) for module, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


def test_the_graph_sees_every_package_and_function_level_imports():
    graph = import_graph()
    assert {package_of(m) for m in graph} >= set(PACKAGES)
    # A lazy import inside a function is an edge: run_bench imports the report when it writes it.
    assert "lockstep_bench.report" in graph["lockstep_bench.runner"]
    # `from package import module` is an edge to that module, not to the package.
    assert "lockstep_bench.workloads" in graph["lockstep_bench.airflow_overhead"]


def test_cycles_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycle_among_the_projects_modules():
    found = sorted(tuple(c) for c in cycles(import_graph()))
    assert not found, "import cycles (each line: modules that import each other, directly or not):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_among_the_packages():
    graph = import_graph()
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        packages.setdefault(package_of(module), set()).update(package_of(t) for t in targets)
    for package, targets in packages.items():
        targets.discard(package)
    assert not cycles(packages), packages


@pytest.mark.parametrize("user", [ENGINE, "lockstep_airflow", "lockstep_plugin"])
def test_the_engine_and_the_airflow_plugin_import_no_tool(user):
    bad = sorted(f"{module} imports {target}" for module, targets in import_graph().items()
                 if package_of(module) == user for target in targets if package_of(target) in TOOLS)
    assert not bad, "\n".join(bad)


def test_the_cli_tool_table_is_the_only_place_the_engine_names_a_tool():
    files = module_files()
    named = sorted(module for module, path in files.items() if package_of(module) == ENGINE
                   and any(tool in path.read_text() for tool in TOOLS))
    assert named == ["lockstep.cli"]


def test_each_tool_of_the_cli_has_the_entry_points_the_cli_calls():
    from lockstep.cli import TOOLS as CLI_TOOLS

    files = module_files()
    assert set(CLI_TOOLS) == {"dev", "demo", "bench", "soak"}
    for name, (module, help_text) in CLI_TOOLS.items():
        assert package_of(module) in TOOLS and module in files, (name, module)
        defined = {node.name for node in ast.parse(files[module].read_text()).body
                   if isinstance(node, ast.FunctionDef)}
        assert {"add_arguments", "main"} <= defined, (name, module, defined)
        assert help_text


def _loaded_tools_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {TOOLS!r}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_building_the_cli_parser_loads_no_tool():
    assert _loaded_tools_after("from lockstep.cli import build_parser\nbuild_parser()") == []


def test_an_engine_subcommand_loads_no_tool():
    code = "from lockstep.cli import main\nassert main(['failpoints', '--json']) == 0"
    assert _loaded_tools_after(code) == []


def test_a_tool_subcommand_loads_its_tool():
    code = "from lockstep.cli import main\ntry:\n    main(['dev', '--help'])\nexcept SystemExit:\n    pass"
    loaded = _loaded_tools_after(code)
    assert "lockstep_dev.cli" in loaded and not any(m.startswith("lockstep_bench") for m in loaded)


def test_a_platform_error_of_a_tool_is_reported_like_an_engine_error(monkeypatch, capsys):
    from lockstep import cli
    from lockstep_dev.procs import PlatformError

    def main(args):
        raise PlatformError(f"port {args.port} is taken")

    tool = types.ModuleType("fake_platform_tool")
    tool.add_arguments = lambda parser: parser.add_argument("--port", type=int)
    tool.main = main
    monkeypatch.setitem(sys.modules, "fake_platform_tool", tool)
    monkeypatch.setitem(cli.TOOLS, "dev", ("fake_platform_tool", "a tool that fails"))
    assert cli.main(["dev", "--port", "9000"]) == 2
    assert capsys.readouterr().err == "lockstep: port 9000 is taken\n"


# ---- the core's layers ---------------------------------------------------------------------------
#: The engine's sub-packages from the bottom up (docs/DESIGN.md, "The map"): a module may import its
#: own layer and the layers below it, never one above. The top-level modules are the public surface
#: and sit at the bottom, except ``connections`` (it reads connections, so it is I/O) and ``cli``.
#: The feature rooms (``formats``, ``tables``, ``sql``) keep a feature's modules together, each module on
#: the floor of its role: it is listed by its full name, and a full name wins over its package.
LAYERS = (
    {"lockstep", "lockstep.errors", "lockstep.spec", "lockstep.paths", "lockstep.logs", "lockstep.rows",
     "lockstep.transform", "lockstep.state_function", "lockstep.formats", "lockstep.formats.names", "lockstep.formats.protobuf",
     "lockstep.tables", "lockstep.tables.interval_join", "lockstep.sql", "lockstep.sql.runtime", "lockstep.iceberg"},
    {"lockstep.model", "lockstep.formats.wire", "lockstep.tables.pins", "lockstep.iceberg.staged_table"},
    {"lockstep.rules", "lockstep.tables.pinning", "lockstep.iceberg.table_commit"},
    {"lockstep.store", "lockstep.kafka", "lockstep.connections", "lockstep.formats.registry",
     "lockstep.formats.resolution", "lockstep.tables.chain", "lockstep.iceberg.table_sink"},
    {"lockstep.spark", "lockstep.formats.codecs", "lockstep.tables.materialize", "lockstep.sql.analyzer",
     "lockstep.iceberg.stage"},
    {"lockstep.steps"},
    {"lockstep.ops"},
    {"lockstep.cli"},
)
#: The feature rooms: one package per feature, its modules on several floors (above).
FEATURES = ("lockstep.formats", "lockstep.tables", "lockstep.sql", "lockstep.iceberg")
#: What a pure module may import from outside the project: the standard library, nothing that does I/O.
PURE = ("lockstep.model", "lockstep.rules")
IO_LIBRARIES = {"boto3", "botocore", "confluent_kafka", "kafka", "pyspark", "requests", "urllib3", "httpx", "socket",
                "subprocess", "airflow", "pyarrow", "pandas", "yaml"}


def layer_of(module: str, layers: tuple[set[str], ...] = LAYERS) -> int:
    """The layer of the core's module: its own when listed by its full name (a feature room's module), else
    its role package's (``lockstep.spark`` for ``lockstep.spark.job``) or, for a top-level module, its own;
    a module of no listed role or name fails (the package ``lockstep`` itself is no fallback)."""
    for name in (module, ".".join(module.split(".")[:2])):
        for index, members in enumerate(layers):
            if name in members:
                return index
        if ".".join(module.split(".")[:2]) in FEATURES:
            break  # a feature room's module must be listed by its own name: its room has no floor
    raise AssertionError(f"{module} is in no layer of LAYERS: add it to one (and to docs/DESIGN.md's map)")


def test_every_module_of_the_core_is_in_a_layer_and_an_unlisted_one_fails():
    for module in engine_modules():
        layer_of(module)
    with pytest.raises(AssertionError, match="lockstep.planted is in no layer"):
        layer_of("lockstep.planted")
    with pytest.raises(AssertionError, match="lockstep.planted.module is in no layer"):
        layer_of("lockstep.planted.module")
    # A feature room's module has the floor of its role, named for it: its room is no floor to fall back on.
    assert layer_of("lockstep.formats.codecs") == layer_of("lockstep.spark.job") > layer_of("lockstep.formats.wire")
    with pytest.raises(AssertionError, match="lockstep.tables.planted is in no layer"):
        layer_of("lockstep.tables.planted")
    without = tuple(members - {"lockstep.state_function"} for members in LAYERS)
    with pytest.raises(AssertionError, match="lockstep.state_function is in no layer"):
        layer_of("lockstep.state_function", without)


def engine_modules() -> dict[str, Path]:
    return {m: p for m, p in module_files().items() if package_of(m) == ENGINE}


def test_the_core_keeps_only_its_public_surface_at_the_top():
    """What users import by name (spec, errors, rows, transform, state_function, connections, paths,
    logs) and the package itself; everything else lives in the packages by role."""
    top = sorted(p.name for p in (ROOT / "include" / "lockstep").glob("*.py"))
    assert len(top) <= 9, top


def test_every_module_of_the_core_imports_only_its_own_layer_or_lower():
    graph = import_graph()
    bad = sorted(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})" for m in engine_modules()
                 for t in graph[m] if package_of(t) == ENGINE and layer_of(t) > layer_of(m))
    assert not bad, "\n".join(bad)


def test_a_layer_check_catches_a_rule_that_imports_io():
    assert layer_of("lockstep.rules.commit_decision") < layer_of("lockstep.kafka.internals")
    assert layer_of("lockstep.model.checkpoint") < layer_of("lockstep.store.checkpoint_store")


def _third_party_imports(path: Path) -> set[str]:
    return _imported_libraries(path.read_text(), str(path))


def _imported_libraries(text: str, name: str = "<module>") -> set[str]:
    """The top-level names a module's source imports (absolute imports, at any depth)."""
    found = set()
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", PURE)
def test_the_pure_packages_import_no_io_library(package):
    bad = sorted(f"{m} imports {lib}" for m, path in engine_modules().items() if m.startswith(package + ".")
                 for lib in _third_party_imports(path) & IO_LIBRARIES)
    assert not bad, "\n".join(bad)


def test_the_pure_modules_of_the_feature_rooms_import_no_io_library():
    """A feature room's module on a pure floor (model's or rules') is as pure as those packages."""
    pure_floors = {layer_of(f"{package}.x") for package in PURE}
    bad = sorted(f"{m} imports {lib}" for m, path in engine_modules().items()
                 if ".".join(m.split(".")[:2]) in FEATURES and layer_of(m) in pure_floors
                 for lib in _third_party_imports(path) & IO_LIBRARIES)
    assert not bad, "\n".join(bad)


#: The one module of each feature room that does the feature's work in Spark.
SPARK_SIDE = {"lockstep.formats.codecs", "lockstep.tables.materialize", "lockstep.sql.runtime", "lockstep.sql.analyzer",
              "lockstep.iceberg.stage"}


def spark_outside_its_side(planted: dict[str, str] | None = None) -> list[str]:
    """The modules of the feature rooms, other than each room's Spark side, that import pyspark (at any depth:
    a lazy import counts). ``planted``: module name -> source, added or replacing."""
    texts = {m: p.read_text() for m, p in engine_modules().items()} | (planted or {})
    return sorted(f"{m} imports pyspark outside its room's Spark side ({', '.join(sorted(SPARK_SIDE))})"
                  for m, text in texts.items() if ".".join(m.split(".")[:2]) in FEATURES and m not in SPARK_SIDE
                  and "pyspark" in _imported_libraries(text, m))


def test_in_a_feature_room_only_its_spark_side_imports_spark():
    assert spark_outside_its_side() == []


def test_a_format_module_importing_spark_outside_its_codecs_fails():
    planted = {"lockstep.formats.wire": "def f():\n    from pyspark.sql import functions\n"}
    assert spark_outside_its_side(planted) == [
        "lockstep.formats.wire imports pyspark outside its room's Spark side (lockstep.formats.codecs, "
        "lockstep.iceberg.stage, "
        "lockstep.sql.analyzer, lockstep.sql.runtime, lockstep.tables.materialize)"]


#: The AWS SDK: made into a client in one place, ``lockstep.store.s3`` (docs/DESIGN.md, "The map").
AWS_SDK = {"boto3", "botocore"}
#: Who reads S3 through ``lockstep.store`` rather than the SDK: the core outside ``store`` and the Airflow
#: plugin (its pages build their stores with ``lockstep.steps.client_factory``). The tools may use the SDK.
THROUGH_THE_STORE = (ENGINE, "lockstep_airflow", "lockstep_plugin")


def aws_sdk_imports(planted: dict[str, str] | None = None) -> list[str]:
    """Modules of the core outside ``lockstep.store``, and of the Airflow plugin, that import boto3 or
    botocore (at any depth: a lazy import inside a function counts). ``planted``: module name -> source,
    added or replacing."""
    texts = {**{m: p.read_text() for m, p in module_files().items()}, **(planted or {})}
    return sorted(f"{module} imports {lib}" for module, text in texts.items()
                  if package_of(module) in THROUGH_THE_STORE and _role(module) != "lockstep.store"
                  for lib in _imported_libraries(text, module) & AWS_SDK)


def test_only_the_store_imports_the_aws_sdk_in_the_core_and_the_airflow_plugin():
    assert aws_sdk_imports() == []


def test_the_aws_sdk_check_fails_on_a_planted_import_and_spares_the_store_and_the_tools():
    planted = {"lockstep_airflow.planted": "def page():\n    import boto3\n",
               "lockstep.ops.planted": "from botocore.config import Config\n",
               "lockstep.store.planted": "import boto3\n", "lockstep_dev.planted": "import boto3\n"}
    assert aws_sdk_imports(planted) == ["lockstep.ops.planted imports botocore",
                                        "lockstep_airflow.planted imports boto3"]


_HTML_TAG = re.compile(r"</?(html|head|body|div|span|table|thead|tbody|tr|td|th|a|p|ul|ol|li|h[1-6]|style|script|link|form|"
                       r"input|button|details|summary|time|code|pre|small|strong|em|nav|section|header|footer|main)\b[^>]*>")


def test_the_airflow_plugin_builds_no_html_in_python_strings():
    """The pages render from Jinja2 templates (autoescaped), so no Python string literal of the plugin
    holds markup; docstrings may show it."""
    found = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and _HTML_TAG.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "\n".join(found)


def test_the_html_check_sees_markup():
    assert _HTML_TAG.search('<td class="n">') and _HTML_TAG.search("</table>")
    assert not _HTML_TAG.search("/plugin/<URL_ROUTE>") and not _HTML_TAG.search("a < b > c")


def _role(module: str) -> str:
    """The unit whose private names stay inside it: a core role package (``lockstep.spark``) or a
    top-level core module, or another top-level package (``lockstep_airflow``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == ENGINE and len(parts) > 1 else parts[0]


def private_imports() -> list[str]:
    """``from X import _name`` where X belongs to another role than the importing module (tests aside)."""
    import ast

    modules = module_files()
    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                target = _ours(node.module, set(modules))
                if target is None or _role(target) == _role(module):
                    continue
                found += [f"{module} imports {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return sorted(found)


def test_no_module_imports_another_packages_private_names():
    assert private_imports() == []


def test_the_private_name_check_tells_roles_apart():
    assert _role("lockstep.spark.keyed_state") == _role("lockstep.spark.job") != _role("lockstep.ops.verify_state")
    assert _role("lockstep_airflow.overview") == _role("lockstep_airflow.checkpoints_page")
    assert _role("lockstep.spec") != _role("lockstep.errors")


# ---- public surfaces (issue 45) ---------------------------------------------------------------------
#: Python outside the packages that imports the core: the spark-submit driver, the DAG files, the JVM
#: writer's Python side.
SCRIPTS = {f"{folder}.{path.stem}": path for folder in ("jobs", "dags", "jvm")
           for path in sorted((ROOT / folder).rglob("*.py"))}


@functools.cache
def _parsed(text: str) -> ast.Module:
    return ast.parse(text)


@functools.lru_cache(maxsize=1)
def _sources() -> dict[str, str]:
    return {m: p.read_text() for m, p in {**module_files(), **SCRIPTS}.items()}


def declared_all(text: str) -> set[str] | None:
    """The names a module's ``__all__`` lists (None: it has none)."""
    for node in _parsed(text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None


def surface_violations(planted: dict[str, str] | None = None) -> list[str]:
    """Every import of the core's from another role (another core role package or top-level module, the
    Airflow plugin, the tools, ``jobs/``, ``dags/``, ``jvm/``; tests aside) of what its surface does not
    offer: a module of a role package that the package's ``__init__`` does not list in ``__all__``, or a
    name that its module's ``__all__`` does not list. ``planted``: module name -> source, added or replacing."""
    texts = {**_sources(), **(planted or {})}
    modules = {m for m in texts if package_of(m) in PACKAGES or m == "lockstep_plugin"}
    surfaces = {m: declared_all(t) for m, t in texts.items() if package_of(m) == ENGINE}
    found = []

    def public_module(target: str) -> bool:
        """A role package's submodule is public when the package lists it (top-level modules always are)."""
        parts = target.split(".")
        return len(parts) < 3 or parts[2] in (surfaces.get(".".join(parts[:2])) or set())

    for module, text in sorted(texts.items()):
        for node in ast.walk(_parsed(text)):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names if package_of(a.name) == ENGINE]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and package_of(node.module) == ENGINE:
                targets = [(f"{node.module}.{a.name}", None) if f"{node.module}.{a.name}" in modules
                           else (node.module, a.name) for a in node.names]
            else:
                continue
            for target, name in targets:
                owner = _ours(target, modules)
                if owner is None or owner == ENGINE or _role(owner) == _role(module):
                    continue
                if not public_module(owner):
                    found.append(f"{module} imports {owner}, which {'.'.join(owner.split('.')[:2])}.__all__ does not list")
                elif name is not None and name not in (surfaces.get(owner) or set()):
                    found.append(f"{module} imports {owner}.{name}, which {owner}.__all__ does not list")
    return sorted(set(found))


def test_every_import_of_the_core_from_another_role_is_of_its_public_surface():
    assert surface_violations() == []


def test_the_surface_check_fails_on_a_planted_private_import_and_a_private_module():
    planted = {"lockstep_airflow.planted": "from lockstep.steps.plan import plan\n"
                                           "from lockstep.spark.job import check_output_schema\n"
                                           "from lockstep.model.checkpoint import CheckpointView\n"
                                           "import lockstep.store.state_cache\n"}
    assert surface_violations(planted) == [
        "lockstep_airflow.planted imports lockstep.spark.job.check_output_schema, which lockstep.spark.job.__all__ "
        "does not list",
        "lockstep_airflow.planted imports lockstep.steps.plan, which lockstep.steps.__all__ does not list",
        "lockstep_airflow.planted imports lockstep.store.state_cache, which lockstep.store.__all__ does not list",
    ]
    # Inside its own role a module may use what the role keeps to itself.
    assert surface_violations({"lockstep.steps.planted": "from lockstep.steps.plan import plan\n"}) == []


#: The core's modules that may lack ``__all__``, each with why: nothing else is excused.
WITHOUT_SURFACE = {
    "lockstep.__main__": "run by `python -m lockstep`, never imported",
}


def modules_without_surface(texts: dict[str, str]) -> list[str]:
    """The core's modules (the package, its role packages and every module in them) whose source
    declares no ``__all__``, apart from `WITHOUT_SURFACE`."""
    return sorted(m for m, text in texts.items() if package_of(m) == ENGINE and m not in WITHOUT_SURFACE
                  and declared_all(text) is None)


def test_every_module_of_the_core_declares_its_surface():
    assert modules_without_surface(_sources()) == []


def test_the_surface_declaration_check_fails_on_a_planted_module_without_one():
    planted = {"lockstep.rules.planted": "def decide() -> None: ...\n",
               "lockstep.planted": "__all__ = ['decide']\ndef decide() -> None: ...\n"}
    assert modules_without_surface({**_sources(), **planted}) == ["lockstep.rules.planted"]


# ---- sizes (issue 68) -------------------------------------------------------------------------------
#: The most lines a function of the core or the Airflow plugin may have, and a file of the core: past them a
#: function is several steps and a file several concepts (docs/DESIGN.md, "The map").
MAX_FUNCTION_LINES = 100
MAX_CORE_FILE_LINES = 800


def oversized(texts: dict[str, str]) -> list[str]:
    """The functions over `MAX_FUNCTION_LINES` (decorators aside) and the core files over `MAX_CORE_FILE_LINES`
    among ``texts`` (module name -> source)."""
    found = []
    for module, text in sorted(texts.items()):
        if package_of(module) == ENGINE and text.count("\n") > MAX_CORE_FILE_LINES:
            found.append(f"{module}: {text.count(chr(10))} lines")
        for node in ast.walk(_parsed(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                found.append(f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    return found


def test_no_function_of_the_core_or_the_plugin_and_no_core_file_is_oversized():
    texts = {m: t for m, t in _sources().items() if package_of(m) in (ENGINE, "lockstep_airflow", "lockstep_plugin")}
    assert oversized(texts) == []


def test_the_size_check_finds_a_long_function_and_a_long_core_file():
    body = "def long():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert oversized({"lockstep_airflow.planted": body}) == ["lockstep_airflow.planted.long: 101 lines"]
    assert oversized({"lockstep.planted": "x = 1\n" * (MAX_CORE_FILE_LINES + 1)}) == ["lockstep.planted: 801 lines"]
