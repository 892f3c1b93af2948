"""Where the Kafka jars are (fetched with Maven into .cache/kafka/libs), the java that runs them, and
Kafka's tool classes run from them (`run_tool`) or handed to a caller (`tool_command`, `java_program`)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_DIR = REPO_ROOT / "kafka"
LIBS_DIR = REPO_ROOT / ".cache" / "kafka" / "libs"
LOG4J_CONFIG = KAFKA_DIR / "log4j2.yaml"
BROKER_MAIN = "kafka.Kafka"
STORAGE_MAIN = "kafka.tools.StorageTool"
DEFAULT_HEAP_OPTS = "-Xmx512m -Xms256m"
TOOL_HEAP_OPTS = "-Xmx256m"
# Same GC flags as Kafka's kafka-run-class.sh, so numbers are comparable to a stock install.
JVM_PERFORMANCE_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true"
)
# Short-lived JVMs (the admin tools, the tests' single-file Java programs) start in about half the
# CPU with C1 only and the serial GC: kafka-configs --describe 3.0 -> 1.7 s user and 14.6 -> 7.5 s
# wall, a source-file launch 2.3 -> 1.3 s user, on the shared 2-core machine at a load average of 20.
# Brokers and the perf tools keep Kafka's flags: they run long and their throughput is measured.
SHORT_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true"
SHORT_LIVED_TOOLS = frozenset(
    {
        "org.apache.kafka.tools.TopicCommand",
        "kafka.admin.ConfigCommand",
        STORAGE_MAIN,
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "org.apache.kafka.tools.MetadataQuorumCommand",
        "org.apache.kafka.tools.ConsoleProducer",
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
    }
)
# Short names for the tool classes we use most (`python -m kafka_rig tool topics --list ...`).
TOOL_ALIASES: dict[str, str] = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "configs": "kafka.admin.ConfigCommand",
    "storage": STORAGE_MAIN,
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "producer-perf": "org.apache.kafka.tools.ProducerPerformance",
    "consumer-perf": "org.apache.kafka.tools.ConsumerPerformance",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
}


class KafkaRigError(RuntimeError):
    """Anything that stops the rig from giving you a working cluster."""


def java_classpath() -> str:
    """Classpath for every Kafka class; java expands the `dir/*` wildcard itself."""
    return str(LIBS_DIR / "*")


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaRigError("java not found on PATH (need a JDK 17+ to run Kafka 4.x)")
    return found


def ensure_jars() -> None:
    """Fetch the Kafka jars with Maven unless they are already in .cache/kafka/libs."""
    wanted = ("kafka_2.13-*.jar", "log4j-slf4j-impl-*.jar")
    if all(glob.glob(str(LIBS_DIR / pattern)) for pattern in wanted):
        return
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaRigError(
            f"Kafka jars missing from {LIBS_DIR} and `mvn` is not installed; "
            "install Maven (apt-get install maven) and re-run"
        )
    # outputDirectory must be absolute: Maven resolves a relative one against the
    # pom's dir (kafka/), not the shell's cwd.
    cmd = [
        mvn,
        "-q",
        "-f",
        str(KAFKA_DIR / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={LIBS_DIR}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not glob.glob(str(LIBS_DIR / "kafka_2.13-*.jar")):
        raise KafkaRigError(f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")


def _log4j_opts(logs_dir: Path | None) -> list[str]:
    opts = [f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"]
    if logs_dir is None:
        opts.append("-Dkafka.file.level=OFF")  # tools: WARN+ to stderr only, no file
    else:
        opts.append(f"-Dkafka.logs.dir={logs_dir}")
    return opts


def _jvm_cmd(
    main_class: str, args: Sequence[str], heap: str, logs_dir: Path | None, jvm_opts: str = JVM_PERFORMANCE_OPTS
) -> list[str]:
    return [
        _java(),
        *heap.split(),
        *jvm_opts.split(),
        *_log4j_opts(logs_dir),
        *os.environ.get("KAFKA_OPTS", "").split(),
        "-cp",
        java_classpath(),
        TOOL_ALIASES.get(main_class, main_class),
        *args,
    ]


def tool_command(main_class: str, *args: str) -> list[str]:
    """The command line of a Kafka tool class (or a TOOL_ALIASES name), for callers that run it in
    the background themselves (run_tool waits for it)."""
    ensure_jars()
    short_lived = TOOL_ALIASES.get(main_class, main_class) in SHORT_LIVED_TOOLS
    return _jvm_cmd(main_class, args, TOOL_HEAP_OPTS, None, SHORT_JVM_OPTS if short_lived else JVM_PERFORMANCE_OPTS)


def java_program(source: Path, *args: str) -> list[str]:
    """The command line of a single-file Java program (compiled at launch) on the Kafka classpath."""
    return [_java(), *TOOL_HEAP_OPTS.split(), *SHORT_JVM_OPTS.split(), "-cp", java_classpath(), str(source), *args]


def run_tool(
    main_class: str,
    *args: str,
    timeout: float = 120,
    check: bool = True,
    input: str | None = None,
    capture: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool class (or a TOOL_ALIASES name) from the same jars.

    Output is captured as text unless capture=False (then it goes to our stdout/stderr).
    With check=True a non-zero exit raises KafkaRigError carrying the tool's output.
    """
    cmd = tool_command(main_class, *args)
    try:
        done = subprocess.run(
            cmd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=capture,
            text=True,
            timeout=timeout,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaRigError(f"{main_class} {' '.join(args)} timed out after {timeout}s") from exc
    if check and done.returncode != 0:
        raise KafkaRigError(
            f"{main_class} {' '.join(args)} exited {done.returncode}\n"
            f"--- stdout\n{done.stdout or ''}--- stderr\n{done.stderr or ''}"
        )
    return done
