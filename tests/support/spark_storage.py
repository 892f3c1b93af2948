"""Storage as platform teams have it, and a Spark standalone cluster, on 127.0.0.1, for the pipeline's
tests and its benchmark; every process started here is stopped by its pid (its own process group).

- ObjectStore: S3Proxy (Maven Central, `make storage-test-jars`), an S3 API server over a jclouds
  blob store, reached with S3A at http://127.0.0.1:PORT, path-style, with keys;
- Hdfs: a NameNode and a DataNode from Apache Hadoop's jars (the same `make storage-test-jars`),
  formatted fresh, reached at hdfs://127.0.0.1:PORT;
- StandaloneCluster: a master and two workers of one core each from the PySpark distribution.

Heaps are small (the machine is shared): 256 MB for each storage daemon and Spark daemon, 512 MB
for each executor.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from tests.support.proxy_fixtures import REPO_ROOT, free_port_block

S3PROXY_JARS = REPO_ROOT / ".cache" / "s3proxy" / "jars"
HDFS_JARS = REPO_ROOT / ".cache" / "hadoop-hdfs" / "jars"
DAEMON_HEAP = "-Xmx256m"
BUCKET = "quotagate"
ACCESS_KEY, SECRET_KEY = "quotagate-test", "quotagate-test-secret"


def _jars(folder: Path) -> str:
    if not any(folder.glob("*.jar")):
        raise RuntimeError(f"no jars in {folder}: run `make storage-test-jars`")
    return f"{folder}/*"


@dataclass
class Daemon:
    """A process in a process group of its own, its output in `log`."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, ready, seconds: float = 120) -> None:  # type: ignore[no-untyped-def]
        """Until ready(log text) is true; fails with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready(self.text()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready within {seconds} s:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def start_daemon(name: str, command: list[str], log: Path, env: dict[str, str] | None = None) -> Daemon:
    process = subprocess.Popen(
        command,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    return Daemon(name, process, log)


def s3_request(endpoint: str, method: str, path: str, query: str = "") -> bytes:
    """One request to the store, signed (AWS signature v2) with the test keys: what the tests need
    of the S3 API beside S3A (making the bucket, listing what it holds)."""
    date = email.utils.formatdate(usegmt=True)
    signed = f"{method}\n\n\n{date}\n{path}".encode()
    signature = base64.b64encode(hmac.new(SECRET_KEY.encode(), signed, hashlib.sha1).digest()).decode()
    request = urllib.request.Request(
        f"{endpoint}{path}{'?' + query if query else ''}",
        method=method,
        headers={"Date": date, "Authorization": f"AWS {ACCESS_KEY}:{signature}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


@dataclass
class ObjectStore:
    """An S3-compatible object store: S3Proxy over jclouds' `transient` blob store (the objects in
    its memory, with S3's semantics: a folder marker is an object) or `filesystem` (each object a file
    under the work folder, for data larger than its heap; folders are directories there, so an empty
    one is not listed and Hadoop's `fs -put`, which checks the parent, cannot use it)."""

    backend: str = "transient"
    heap: str = DAEMON_HEAP
    port: int = 0
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def uri(self, key: str = "") -> str:
        return f"s3a://{BUCKET}/{key}"

    def hadoop_conf(self) -> dict[str, str]:
        """The S3A settings a job passes as --conf spark.hadoop.KEY=VALUE (docs/pipeline.md)."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            # S3Proxy answers DeleteObjects carrying the SDK's CRC32 header with 501: one DELETE a key
            "fs.s3a.multiobjectdelete.enable": "false",
        }

    def spark_conf(self) -> dict[str, str]:
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}

    def start(self, workdir: Path) -> ObjectStore:
        self.port = free_port_block(1)
        properties = workdir / "s3proxy.properties"
        backend = f"jclouds.provider={self.backend}\njclouds.identity=local\njclouds.credential=local\n"
        if self.backend == "filesystem":
            (workdir / "objects" / BUCKET).mkdir(parents=True, exist_ok=True)  # a bucket is a folder there
            backend += f"jclouds.filesystem.basedir={workdir / 'objects'}\n"
        properties.write_text(
            f"s3proxy.endpoint={self.endpoint}\ns3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={ACCESS_KEY}\ns3proxy.credential={SECRET_KEY}\n{backend}"
        )
        logback = workdir / "logback.xml"
        logback.write_text(
            '<configuration><appender name="out" class="ch.qos.logback.core.ConsoleAppender"><encoder>'
            "<pattern>%d %level %logger{20} - %msg%n</pattern></encoder></appender>"
            '<root level="WARN"><appender-ref ref="out"/></root></configuration>'
        )
        command = ["java", self.heap, "-XX:+UseSerialGC", f"-Dlogback.configurationFile={logback}"]
        command += ["-cp", _jars(S3PROXY_JARS), "org.gaul.s3proxy.Main", "--properties", str(properties)]
        daemon = start_daemon("s3proxy", command, workdir / "s3proxy.log")
        self.daemons.append(daemon)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:  # any S3 answer (403 for an unsigned request) means it serves
                urllib.request.urlopen(self.endpoint, timeout=2)
            except urllib.error.HTTPError:
                if self.backend != "filesystem":
                    s3_request(self.endpoint, "PUT", f"/{BUCKET}")
                return self
            except OSError:
                if daemon.process.poll() is not None:
                    break
                time.sleep(0.3)
        raise RuntimeError(f"S3Proxy did not answer on {self.endpoint}:\n{daemon.text()[-3000:]}")

    def stored_keys(self, prefix: str = "") -> list[str]:
        """The keys the store holds under `prefix`, as its S3 API lists them (ListObjects)."""
        keys: list[str] = []
        marker = ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, "marker": marker})
            page = ElementTree.fromstring(s3_request(self.endpoint, "GET", f"/{BUCKET}", query))
            ns = {"s3": page.tag.split("}")[0].strip("{")}
            found = [key.text or "" for key in page.findall("s3:Contents/s3:Key", ns)]
            keys += found
            if page.findtext("s3:IsTruncated", "false", ns) != "true" or not found:
                return keys
            marker = found[-1]

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()


_HDFS_SITE = """<configuration>
<property><name>dfs.namenode.name.dir</name><value>{root}/name</value></property>
<property><name>dfs.datanode.data.dir</name><value>{root}/data</value></property>
<property><name>dfs.replication</name><value>1</value></property>
<property><name>dfs.permissions.enabled</name><value>false</value></property>
<property><name>dfs.namenode.rpc-address</name><value>127.0.0.1:{p0}</value></property>
<property><name>dfs.namenode.http-address</name><value>127.0.0.1:{p1}</value></property>
<property><name>dfs.datanode.address</name><value>127.0.0.1:{p2}</value></property>
<property><name>dfs.datanode.http.address</name><value>127.0.0.1:{p3}</value></property>
<property><name>dfs.datanode.ipc.address</name><value>127.0.0.1:{p4}</value></property>
<property><name>dfs.namenode.safemode.extension</name><value>0</value></property>
<property><name>dfs.namenode.datanode.registration.ip-hostname-check</name><value>false</value></property>
<property><name>dfs.heartbeat.interval</name><value>1</value></property>
</configuration>
"""
_LOG4J_CONSOLE = """log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
"""
_LOG4J = (  # what the tests wait for: the daemons' start, the block report, safe mode left
    "log4j.rootLogger=WARN,console\n"
    "log4j.logger.org.apache.hadoop.hdfs.server.namenode.NameNode=INFO\n"
    "log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode=INFO\n"
    "log4j.logger.org.apache.hadoop.hdfs.StateChange=INFO\n" + _LOG4J_CONSOLE
)


@dataclass
class Hdfs:
    """A NameNode and a DataNode on 127.0.0.1, one replica of each block."""

    port: int = 0
    daemons: list[Daemon] = field(default_factory=list)

    def uri(self, path: str = "") -> str:
        return f"hdfs://127.0.0.1:{self.port}/{path}"

    def hadoop_conf(self) -> dict[str, str]:
        return {}  # the URI says all; PySpark's jars carry the HDFS client

    def spark_conf(self) -> dict[str, str]:
        return {}

    def start(self, workdir: Path) -> Hdfs:
        self.port = first = free_port_block(5)
        conf = workdir / "conf"
        # The daemons' web UIs look their (unused) pages up on the classpath; Maven's jars carry none.
        for app in ("hdfs", "datanode", "static"):
            (conf / "webapps" / app).mkdir(parents=True, exist_ok=True)
        (conf / "core-site.xml").write_text(
            f"<configuration><property><name>fs.defaultFS</name><value>{self.uri()}</value></property>"
            f"<property><name>hadoop.tmp.dir</name><value>{workdir}/tmp</value></property></configuration>\n"
        )
        ports = {f"p{i}": first + i for i in range(5)}
        (conf / "hdfs-site.xml").write_text(_HDFS_SITE.format(root=workdir, **ports))
        (conf / "log4j.properties").write_text(_LOG4J)
        java = ["java", DAEMON_HEAP, "-XX:+UseSerialGC", "-cp", f"{conf}:{_jars(HDFS_JARS)}"]
        formatted = subprocess.run(
            [*java, "org.apache.hadoop.hdfs.server.namenode.NameNode", "-format", "-force", "-nonInteractive"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if formatted.returncode != 0:
            raise RuntimeError(f"hdfs namenode -format failed:\n{formatted.stdout[-2000:]}{formatted.stderr[-2000:]}")
        namenode = start_daemon(
            "namenode", [*java, "org.apache.hadoop.hdfs.server.namenode.NameNode"], workdir / "nn.log"
        )
        datanode = start_daemon(
            "datanode", [*java, "org.apache.hadoop.hdfs.server.datanode.DataNode"], workdir / "dn.log"
        )
        self.daemons += [namenode, datanode]
        datanode.wait_for(lambda text: "Successfully sent block report" in text)
        namenode.wait_for(lambda text: "Leaving safe mode" in text)
        return self

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


@dataclass
class StandaloneCluster:
    """A Spark master and two workers (one core, 1 GB for executors each) from the PySpark distribution."""

    url: str = ""
    daemons: list[Daemon] = field(default_factory=list)

    def start(self, workdir: Path) -> StandaloneCluster:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_MEMORY": "256m",
        }
        port = free_port_block(4)
        master = start_daemon(
            "spark-master",
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(port + 1),
            ],
            workdir / "master.log",
            env,
        )
        self.daemons.append(master)
        master.wait_for(lambda text: "I have been elected leader" in text, 90)
        self.url = f"spark://127.0.0.1:{port}"
        workers = []
        for index in range(2):  # both at once: two JVM start-ups overlap instead of following each other
            args = ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(port + 2 + index)]
            workers.append(
                start_daemon(
                    f"spark-worker-{index}",
                    [
                        str(home / "bin" / "spark-class"),
                        "org.apache.spark.deploy.worker.Worker",
                        *args,
                        "--work-dir",
                        str(workdir / f"work-{index}"),
                        self.url,
                    ],
                    workdir / f"worker-{index}.log",
                    env,
                )
            )
        self.daemons += workers
        for worker in workers:
            worker.wait_for(lambda text: "Successfully registered with master" in text, 90)
        return self

    def spark_conf(self) -> dict[str, str]:
        """What a job on this cluster asks for: both workers' cores, executors of 512 MB."""
        return {"spark.executor.memory": "512m", "spark.cores.max": "2", "spark.ui.enabled": "false"}

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


def hadoop_fs(conf: dict[str, str], *args: str) -> str:
    """Hadoop's own `hadoop fs` (FsShell) from the test jars, with S3A beside HDFS: how a platform
    team puts files into its store. `conf`: Hadoop settings (ObjectStore.hadoop_conf), written as
    the core-site.xml it reads."""
    s3a = REPO_ROOT / ".cache" / "spark-s3a" / "jars"
    with tempfile.TemporaryDirectory(prefix="quotagate-hadoop-conf-") as folder:
        properties = "".join(
            f"<property><name>{escape(key)}</name><value>{escape(value)}</value></property>"
            for key, value in conf.items()
        )
        (Path(folder) / "core-site.xml").write_text(f"<configuration>{properties}</configuration>\n")
        (Path(folder) / "log4j.properties").write_text("log4j.rootLogger=ERROR,console\n" + _LOG4J_CONSOLE)
        done = subprocess.run(
            [
                "java",
                DAEMON_HEAP,
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                "-cp",
                f"{folder}:{_jars(HDFS_JARS)}:{_jars(s3a)}",
                "org.apache.hadoop.fs.FsShell",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if done.returncode != 0:
        raise RuntimeError(f"hadoop fs {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout
