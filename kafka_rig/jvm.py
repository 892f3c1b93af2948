"""Where the Kafka jars are (fetched with Maven: the default version into .cache/kafka/libs, any other
into .cache/kafka-versions/VERSION/libs), the java that runs them, and Kafka's tool classes run from
them (`run_tool`) or handed to a caller (`tool_command`, `java_program`).

Which Kafka: a `Variant`, a version from Maven Central and, for 3.x, ZooKeeper mode or KRaft. The
default is kafka/pom.xml's version in KRaft mode, or what KAFKA_RIG_KAFKA says ("4.4.0", "3.9.1-zk"):
clusters, tools and Java programs then all run that Kafka's jars."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_DIR = REPO_ROOT / "kafka"
LIBS_DIR = REPO_ROOT / ".cache" / "kafka" / "libs"
# Every other version's jars, one folder each (the same pom, its kafka.version set on the command line).
VERSIONS_DIR = REPO_ROOT / ".cache" / "kafka-versions"
VARIANT_ENV = "KAFKA_RIG_KAFKA"
ZOOKEEPER_SUFFIX = "-zk"
LOG4J_CONFIG = KAFKA_DIR / "log4j2.properties"
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
        "org.apache.kafka.tools.ConfigCommand",
        "kafka.tools.ConsoleProducer",
        "org.apache.kafka.tools.BrokerApiVersionsCommand",
        "kafka.admin.BrokerApiVersionsCommand",
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
    "broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}
# Tool classes that moved between the versions the rig runs, by each of their names: whichever the
# version's jars hold runs, so a test or script names a tool once for every version (3.9 still has
# the Scala ConsoleProducer and BrokerApiVersionsCommand; 4.4 moved ConfigCommand to the tools jar).
MOVED_TOOLS: tuple[frozenset[str], ...] = (
    frozenset({"kafka.admin.ConfigCommand", "org.apache.kafka.tools.ConfigCommand"}),
    frozenset({"org.apache.kafka.tools.ConsoleProducer", "kafka.tools.ConsoleProducer"}),
    frozenset({"org.apache.kafka.tools.BrokerApiVersionsCommand", "kafka.admin.BrokerApiVersionsCommand"}),
)


class KafkaRigError(RuntimeError):
    """Anything that stops the rig from giving you a working cluster."""


def _pom_version() -> str:
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", (KAFKA_DIR / "pom.xml").read_text())
    if found is None:
        raise KafkaRigError(f"no <kafka.version> in {KAFKA_DIR / 'pom.xml'}")
    return found.group(1).strip()


DEFAULT_VERSION = _pom_version()
_VERSION_RE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


@dataclass(frozen=True)
class Variant:
    """A Kafka to run: its version (Maven Central's) and whether it runs with ZooKeeper (3.x only)."""

    version: str = DEFAULT_VERSION
    zookeeper: bool = False

    def __post_init__(self) -> None:
        if not _VERSION_RE.fullmatch(self.version):
            raise KafkaRigError(f"Kafka version {self.version!r} is not of the form X.Y.Z")
        if self.zookeeper and self.major >= 4:
            raise KafkaRigError(f"Kafka {self.version} has no ZooKeeper mode (4.0 removed it)")

    @classmethod
    def parse(cls, text: str) -> Variant:
        """ "4.4.0" (KRaft) or "3.9.1-zk" (ZooKeeper mode), as str() writes it."""
        text = text.strip()
        zookeeper = text.endswith(ZOOKEEPER_SUFFIX)
        return cls(text.removesuffix(ZOOKEEPER_SUFFIX) if zookeeper else text, zookeeper)

    def __str__(self) -> str:
        return self.version + (ZOOKEEPER_SUFFIX if self.zookeeper else "")

    @property
    def release(self) -> tuple[int, int, int]:
        major, minor, patch = (int(part) for part in self.version.split("."))
        return major, minor, patch

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def share_groups(self) -> bool:
        """Whether its brokers serve share groups (KIP-932): KRaft from 4.1, where share.version exists
        (4.0 had them as early access, behind an internal switch)."""
        return not self.zookeeper and self.release >= (4, 1, 0)

    @property
    def is_default(self) -> bool:
        return self.version == DEFAULT_VERSION

    @property
    def libs_dir(self) -> Path:
        """Where this version's jars are (the default version's in .cache/kafka/libs, as before)."""
        return LIBS_DIR if self.is_default else VERSIONS_DIR / self.version / "libs"


def default_variant() -> Variant:
    """KAFKA_RIG_KAFKA's Kafka, else kafka/pom.xml's in KRaft mode."""
    text = os.environ.get(VARIANT_ENV, "").strip()
    return Variant.parse(text) if text else Variant()


def java_classpath(variant: Variant | None = None) -> str:
    """Classpath for every Kafka class; java expands the `dir/*` wildcard itself."""
    return str((variant or default_variant()).libs_dir / "*")


# Options KIP-1147 (Kafka 4.1) renamed, as the versions before spell them, by tool: a test writes the
# new spelling once and runs on every version (4.2 and 4.4 still take the old ones, deprecated).
OPTIONS_RENAMED_IN = (4, 1, 0)
_PRODUCER_OPTIONS = {"--command-property": "--producer-property", "--command-config": "--producer.config"}
_CONSUMER_OPTIONS = {"--command-property": "--consumer-property", "--command-config": "--consumer.config"}
OLD_OPTION_NAMES: dict[str, dict[str, str]] = {
    "org.apache.kafka.tools.ConsoleProducer": _PRODUCER_OPTIONS,
    "kafka.tools.ConsoleProducer": _PRODUCER_OPTIONS,
    "org.apache.kafka.tools.consumer.ConsoleConsumer": _CONSUMER_OPTIONS,
    "org.apache.kafka.tools.ProducerPerformance": {
        "--command-property": "--producer-props",
        "--command-config": "--producer.config",
    },
    "org.apache.kafka.tools.ConsumerPerformance": {
        "--command-config": "--consumer.config",
        "--num-records": "--messages",
    },
}


def tool_arguments(tool: str, args: Sequence[str], variant: Variant | None = None) -> list[str]:
    """`args` as `tool` of this version spells its options (OLD_OPTION_NAMES before 4.1)."""
    if (variant or default_variant()).release >= OPTIONS_RENAMED_IN:
        return list(args)
    renamed = OLD_OPTION_NAMES.get(tool, {})
    return [renamed.get(arg, arg) for arg in args]


@lru_cache(maxsize=16)
def _classes(libs: Path) -> frozenset[str]:
    """Every class name in the jars of `libs` (for the tools that moved: read once per version)."""
    names: set[str] = set()
    for jar in sorted(libs.glob("*.jar")):
        with zipfile.ZipFile(jar) as archive:
            names.update(n[:-6].replace("/", ".") for n in archive.namelist() if n.endswith(".class"))
    return frozenset(names)


def resolve_tool(name: str, variant: Variant | None = None) -> str:
    """The class to run for a tool class name or TOOL_ALIASES name, in this version's jars."""
    wanted = TOOL_ALIASES.get(name, name)
    names = next((moved for moved in MOVED_TOOLS if wanted in moved), None)
    if names is None:
        return wanted
    present = _classes((variant or default_variant()).libs_dir)
    return wanted if wanted in present else next((other for other in sorted(names) if other in present), wanted)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaRigError("java not found on PATH (need a JDK 17+ to run Kafka 4.x)")
    return found


def ensure_jars(variant: Variant | None = None) -> None:
    """Fetch a Kafka version's jars with Maven unless they are already in its folder."""
    variant = variant or default_variant()
    libs = variant.libs_dir
    wanted = (f"kafka_2.13-{variant.version}.jar", "log4j-slf4j-impl-*.jar")
    if all(glob.glob(str(libs / pattern)) for pattern in wanted):
        return
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaRigError(
            f"Kafka jars missing from {libs} and `mvn` is not installed; "
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
        f"-DoutputDirectory={libs}",
        "-DincludeScope=runtime",
    ]
    if not variant.is_default:
        # A command-line property overrides the pom's. Kafka 3.x brings its own slf4j binding (reload4j),
        # which would race the pom's log4j2 one for the broker's logging: left out.
        cmd += [f"-Dkafka.version={variant.version}", "-DexcludeArtifactIds=slf4j-reload4j"]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not glob.glob(str(libs / f"kafka_2.13-{variant.version}.jar")):
        raise KafkaRigError(f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")


def _log4j_opts(logs_dir: Path | None) -> list[str]:
    opts = [f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"]
    if logs_dir is None:
        opts.append("-Dkafka.file.level=OFF")  # tools: WARN+ to stderr only, no file
    else:
        opts.append(f"-Dkafka.logs.dir={logs_dir}")
    return opts


def _jvm_cmd(
    main_class: str,
    args: Sequence[str],
    heap: str,
    logs_dir: Path | None,
    jvm_opts: str = JVM_PERFORMANCE_OPTS,
    variant: Variant | None = None,
) -> list[str]:
    return [
        _java(),
        *heap.split(),
        *jvm_opts.split(),
        *_log4j_opts(logs_dir),
        *os.environ.get("KAFKA_OPTS", "").split(),
        "-cp",
        java_classpath(variant),
        main_class,
        *args,
    ]


def tool_command(main_class: str, *args: str, variant: Variant | None = None) -> list[str]:
    """The command line of a Kafka tool class (or a TOOL_ALIASES name), for callers that run it in
    the background themselves (run_tool waits for it)."""
    ensure_jars(variant)
    tool = resolve_tool(main_class, variant)
    jvm_opts = SHORT_JVM_OPTS if tool in SHORT_LIVED_TOOLS else JVM_PERFORMANCE_OPTS
    return _jvm_cmd(tool, tool_arguments(tool, args, variant), TOOL_HEAP_OPTS, None, jvm_opts, variant)


def java_program(source: Path, *args: str, variant: Variant | None = None) -> list[str]:
    """The command line of a single-file Java program (compiled at launch) on the Kafka classpath."""
    ensure_jars(variant)
    classpath = java_classpath(variant)
    return [_java(), *TOOL_HEAP_OPTS.split(), *SHORT_JVM_OPTS.split(), "-cp", classpath, str(source), *args]


def run_tool(
    main_class: str,
    *args: str,
    timeout: float = 120,
    check: bool = True,
    input: str | None = None,
    capture: bool = True,
    variant: Variant | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool class (or a TOOL_ALIASES name) from the same jars.

    Output is captured as text unless capture=False (then it goes to our stdout/stderr).
    With check=True a non-zero exit raises KafkaRigError carrying the tool's output.
    """
    cmd = tool_command(main_class, *args, variant=variant)
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
