"""`countersink reconcile` of one day on Apache Spark 3.5: the day's parts as Spark tasks.

The driver makes an RDD of the part indexes 0..N-1 (N: `--parts`, default the day's slice
count read from the configuration), one partition each. Each task runs

    countersink reconcile --slice I/N --format json --config FILE --day D [--family F] ...

and returns the part's JSON report. A part only reads the store and is deterministic, so
a task that fails or is killed is simply run again by Spark (`spark.task.maxFailures`)
with the same result. The driver writes the collected reports to a directory and runs
`countersink reconcile merge`, which prints the report a single `countersink reconcile`
of the day gives and decides the exit code: 0, or 3 on unexplained drift over the
threshold (2 when the parts cannot be merged). This script exits with that code, and
`spark-submit` with it; with 1 when a part failed on every try Spark gave it.

Nothing of reconcile is re-implemented here: the binary reads the store (through its
own driver, with its own retries and consistency) and judges every key; Spark schedules,
retries and collects. See README.md beside this file for how to run it.
"""

import argparse
import datetime
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

# The defaults of `exact.buckets`, `key_index.enabled` and `key_index.buckets` (the
# configuration reference, docs/src/reference/configuration.md): the day's slice count when the configuration leaves them out.
DEFAULT_EXACT_BUCKETS = 64
DEFAULT_KEY_INDEX_ENABLED = False
DEFAULT_KEY_INDEX_BUCKETS = 16

# The tail of a failed part's standard error kept in the task's error.
STDERR_TAIL = 2000


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="countersink_reconcile.py",
        description="countersink reconcile of one day, its parts run as Spark tasks and merged.",
    )
    parser.add_argument("--config", required=True,
                        help="countersink.toml: a path present on every node, or the name of a file shipped with --files")
    parser.add_argument("--day", required=True,
                        help="YYYY-MM-DD, `today` or `yesterday` (UTC, resolved once by the driver)")
    parser.add_argument("--family", help="one family [default: every family with exact = true]")
    parser.add_argument("--parts", type=int,
                        help="how many parts (tasks); must divide the day's slice count [default: that count]")
    parser.add_argument("--binary", default="countersink",
                        help="the countersink binary: a path present on every node, or the name of a file shipped with --files [default: countersink]")
    parser.add_argument("--format", default="text", choices=["text", "json"], help="the merged report's format")
    parser.add_argument("--threshold", help="passed to every part (see countersink reconcile --help)")
    parser.add_argument("--tag", action="append", default=[], metavar="K:V", help="passed to every part; repeatable")
    parser.add_argument("--concurrency", help="keys whose counters one part reads at once [default: the binary's]")
    parser.add_argument("--resolve", action="store_true", help="each part writes its resolved verdicts (idempotent)")
    parser.add_argument("--close", action="store_true", help="each part keeps its keys' exact totals (idempotent)")
    parser.add_argument("--keep-parts", metavar="DIR", help="also keep the parts' JSON reports in DIR (on the driver)")
    return parser.parse_args(argv)


def resolve_day(text):
    """One day for every part: `today`/`yesterday` read once here, so that parts run
    either side of midnight still read the same day."""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if text == "today":
        return today.isoformat()
    if text == "yesterday":
        return (today - datetime.timedelta(days=1)).isoformat()
    return text


def day_slices(config_path):
    """The day's slice count, as `countersink` computes it: `exact.buckets`, or with the key
    index on the greatest common divisor of it and `key_index.buckets`."""
    with open(config_path, "rb") as f:
        config = tomllib.load(f)
    exact = max(1, config.get("exact", {}).get("buckets", DEFAULT_EXACT_BUCKETS))
    key_index = config.get("key_index", {})
    if not key_index.get("enabled", DEFAULT_KEY_INDEX_ENABLED):
        return exact
    return math.gcd(exact, max(1, key_index.get("buckets", DEFAULT_KEY_INDEX_BUCKETS)))


def local_file(name):
    """`name` on this node: a path (with a `/`) as given; a bare name, the file shipped with
    `--files` (SparkFiles) or else a program on the PATH."""
    if os.sep in name:
        if os.path.exists(name):
            return os.path.abspath(name)
        raise FileNotFoundError(f"{name}: not on this node ({socket.gethostname()})")
    from pyspark import SparkFiles

    shipped = os.path.join(SparkFiles.getRootDirectory(), name)
    if os.path.exists(shipped):
        return shipped
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name}: not shipped with --files, not on the PATH of {socket.gethostname()}")


def executable(path):
    """`path`, made executable when a file shipped with --files arrived without its mode."""
    if not os.access(path, os.X_OK):
        os.chmod(path, os.stat(path).st_mode | 0o111)
    return path


def part_command(options, day, index, parts):
    """The countersink command line of part `index` of `parts`, on this node."""
    command = [
        executable(local_file(options.binary)), "reconcile",
        "--slice", f"{index}/{parts}", "--format", "json",
        "--config", local_file(options.config), "--day", day,
    ]
    if options.family:
        command += ["--family", options.family]
    if options.threshold is not None:
        command += ["--threshold", options.threshold]
    for tag in options.tag:
        command += ["--tag", tag]
    if options.concurrency is not None:
        command += ["--concurrency", options.concurrency]
    if options.resolve:
        command.append("--resolve")
    if options.close:
        command.append("--close")
    return command


def run_part(options, day, parts, index):
    """One Spark task: part `index`, as (index, its JSON report, what ran where). A part
    exits 0 once its report is written, whatever its verdicts; anything else fails the
    task, and Spark runs it again."""
    from pyspark import SparkFiles, TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context else 0
    started = time.monotonic()
    command = part_command(options, day, index, parts)
    # Relative paths in the configuration (a password file shipped with --files) are
    # read beside the shipped files.
    proc = subprocess.run(command, capture_output=True, cwd=SparkFiles.getRootDirectory())
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-STDERR_TAIL:]
        raise RuntimeError(
            f"part {index}/{parts} (attempt {attempt}) on {socket.gethostname()}: "
            f"countersink exited with {proc.returncode}: {tail}"
        )
    ran = {"attempt": attempt, "host": socket.gethostname(), "seconds": time.monotonic() - started}
    return index, proc.stdout.decode(), ran


def merge(options, reports, log):
    """`countersink reconcile merge` of the parts' reports (index -> JSON): prints the
    merged report, logs what the merge said on its stderr, and returns its exit code."""
    with tempfile.TemporaryDirectory(prefix="countersink-parts-") as work:
        directory = options.keep_parts or work
        os.makedirs(directory, exist_ok=True)
        files = []
        for index, text in sorted(reports.items()):
            path = os.path.join(directory, f"part-{index:05}.json")
            with open(path, "w") as f:
                f.write(text)
            files.append(path)
        command = [executable(local_file(options.binary)), "reconcile", "merge", "--format", options.format, *files]
        proc = subprocess.run(command, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        for line in proc.stderr.splitlines():
            log(f"merge: {line}")
        return proc.returncode


def keys_of(text):
    import json

    return sum(report["summary"]["keys"] for report in json.loads(text))


def main(argv):
    options = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("countersink-reconcile").getOrCreate()
    context = spark.sparkContext
    # spark-submit joins a Python driver's stderr to its stdout, where the merged report
    # goes: what the driver says goes to Spark's log (spark-submit's stderr) instead.
    logger = context._jvm.org.apache.log4j.LogManager.getLogger("countersink.reconcile")

    def log(message):
        logger.info(message)
    try:
        day = resolve_day(options.day)
        parts = options.parts or day_slices(local_file(options.config))
        log(f"Spark {context.version} ({context.master}): {day}, {parts} parts")
        started = time.monotonic()
        results = (
            context.parallelize(range(parts), parts)
            .map(lambda index: run_part(options, day, parts, index))
            .collect()
        )
        seconds = time.monotonic() - started
        reports = {}
        keys = 0
        for index, text, ran in results:
            reports[index] = text
            part_keys = keys_of(text)
            keys += part_keys
            log(f"part {index}/{parts}: {part_keys} keys on {ran['host']}, attempt {ran['attempt']}, "
                f"{ran['seconds']:.2f} s")
        log(f"{parts} parts, {keys} keys in {seconds:.2f} s ({keys / max(seconds, 1e-9):.0f} keys/s)")
        code = merge(options, reports, log)
    finally:
        spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
