"""``lockstep dev``: start, inspect and stop the local platform. The engine's CLI imports this
module only when ``lockstep dev`` runs (``lockstep.cli.TOOLS``)."""
from __future__ import annotations

import argparse
import json
import shlex

#: The services' ports that `up` takes as --<name>-port.
PORT_NAMES = ("kafka", "controller", "s3", "airflow", "spark-connect", "registry", "registry-management", "postgres",
              "iceberg")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dev_sub = parser.add_subparsers(dest="dev_command", required=True)
    up = dev_sub.add_parser("up", help="start Kafka, the S3 server, a Schema Registry and a Spark Connect server "
                                       "(and Airflow with --with airflow); idempotent")
    up.add_argument("--with", dest="with_", action="append", default=[], choices=["airflow"],
                    help="also start this optional service")
    up.add_argument("--airflow-db", choices=["sqlite", "postgres"], default=None,
                    help="Airflow's metadata database: sqlite (Airflow's default; one writer at a time) or postgres "
                         "(a PostgreSQL server of the platform's, for many pipelines; docs/platform.md); default: "
                         "the one the platform was last started with, sqlite for a new one")
    up.add_argument("--no-spark-connect", dest="spark_connect", action="store_false",
                    help="do not start the Spark Connect server (checkpoints in connect mode, the default, need it)")
    up.add_argument("--warm-checkpoints", action="store_true",
                    help="warm a Spark Connect server it starts up with a few tiny real checkpoints (stateless, dedup, "
                         "windows; about 17 s), so that the first checkpoint on it does not pay for a new JVM")
    up.add_argument("--no-registry", dest="registry", action="store_false",
                    help="do not start the Schema Registry (Apicurio; needs Java 21+; pipelines with a "
                         "registry-framed format need it)")
    up.add_argument("--no-iceberg", dest="iceberg", action="store_false",
                    help="do not start the Iceberg REST catalog (pipelines with sink.iceberg need it)")
    up.add_argument("--cluster", action="store_true",
                    help="3 Kafka brokers (replication factor 3, min ISR 2) and a Spark standalone master with "
                         "2 workers instead of one broker and Spark in local mode")
    up.add_argument("--single", dest="cluster", action="store_false",
                    help="one Kafka broker and Spark in local mode (the default for a new platform)")
    up.set_defaults(cluster=None)  # neither flag: keep the topology the platform was last started with
    up.add_argument("--free-ports", action="store_true", help="pick free ports for every service not yet running")
    for name in PORT_NAMES:
        up.add_argument(f"--{name}-port", type=int, default=None,
                        help=f"{name} port (0 = any free port)"
                        + ("; single-node topology" if name in ("kafka", "controller") else ""))
    down = dev_sub.add_parser("down", help="stop what `up` started; data stays unless --wipe")
    down.add_argument("--wipe", action="store_true", help="also delete the platform's data and logs")
    status = dev_sub.add_parser("status", help="what runs, where, and its log file")
    status.add_argument("--json", action="store_true")
    dev_sub.add_parser("env", help="shell exports for clients: `eval \"$(lockstep dev env)\"`")


def main(args: argparse.Namespace) -> int:
    from lockstep_dev.platform import Platform

    if args.dev_command == "up":
        ports = {n: getattr(args, f"{n.replace('-', '_')}_port") for n in PORT_NAMES}
        platform = Platform(ports={k: v for k, v in ports.items() if v is not None}, cluster=args.cluster,
                            free_ports=args.free_ports, warm_checkpoints=args.warm_checkpoints,
                            airflow_db=args.airflow_db)
        platform.up(with_airflow="airflow" in args.with_, with_connect=args.spark_connect,
                    with_registry=args.registry, with_iceberg=args.iceberg)
        print('\nClients: eval "$(lockstep dev env)"   Stop: lockstep dev down')
        return 0
    platform = Platform()
    if args.dev_command == "down":
        platform.down(wipe=args.wipe)
        return 0
    if args.dev_command == "status":
        status = platform.status()
        if args.json:
            print(json.dumps(status, indent=2))
        else:
            for name, s in status.items():
                state = "running" if s["running"] else "stopped"
                print(f"{name:14} {state:8} {s['address']:28} pid={s['pid'] or '-'}  log={s['log']}")
        return 0
    if args.dev_command == "env":
        for key, value in platform.client_env().items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    raise AssertionError(args.dev_command)
