"""Where the pipeline reads and writes: any Hadoop-compatible URI (file://, s3a://, hdfs://, abfs://,
gs:// …, or a path, which Hadoop resolves against its default filesystem: the local one unless
fs.defaultFS says otherwise), through the driver's Hadoop FileSystem, as Spark itself reaches it.

Spark reads and writes the tables; this is for what the driver does itself: list inputs, check that
something exists, read and write small files (TOML, shell, HTML, the recommendations' Parquet).
Credentials and endpoints are Hadoop's settings (`--conf spark.hadoop.fs.s3a.…`). Never a local
path API here: the only local files the pipeline knows are the proxy's quota file (apply, promote)
and Spark's own jars.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

# The scheme of URIs this machine reads as local files (Hadoop's LocalFileSystem).
LOCAL_SCHEMES = ("", "file")


def scheme_of(uri: str) -> str:
    """`s3a` for s3a://bucket/key, "" for a path (a Windows drive letter is no scheme)."""
    head, sep, _ = uri.partition("://")
    if not sep:
        head, sep, _ = uri.partition(":")
        return head.lower() if sep and len(head) > 1 and "/" not in head else ""
    return head.lower()


def child(base: str, *names: str) -> str:
    """`base`/`name`/…, for a URI or a path alike."""
    return "/".join([base.rstrip("/"), *names])


def shown_path(uri: str) -> str:
    """A URI as a person reads it: local files as their path (what was typed), others as they are."""
    for prefix in ("file://", "file:"):
        if uri.startswith(prefix):
            rest = uri.removeprefix(prefix)
            return rest if rest.startswith("/") else uri
    return uri


@dataclass(frozen=True)
class StoredFile:
    uri: str  # fully qualified (file:/…, s3a://bucket/…)
    relative: str  # its path under the listed folder ("" for a file listed by name)
    size: int


class Storage:
    """The driver's view of the filesystems Spark uses: the session's Hadoop configuration."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs_path(self, uri: str):  # type: ignore[no-untyped-def]
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        fs = path.getFileSystem(self._conf)
        if self._jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem").isInstance(fs):
            fs = fs.getRawFileSystem()  # no hidden .crc file beside each one written
        return fs, fs.makeQualified(path)

    def qualified(self, uri: str) -> str:
        return str(self._fs_path(uri)[1].toString())

    def exists(self, uri: str) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.exists(path))

    def is_file(self, uri: str) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.exists(path) and fs.getFileStatus(path).isFile())

    def list_files(self, uri: str) -> list[StoredFile]:
        """The files under `uri` (itself, if a file), recursively, in name order, leaving out those
        under a hidden name (starting with . or _: Spark's and the proxy's temporary files)."""
        fs, path = self._fs_path(uri)
        status = fs.getFileStatus(path)
        if status.isFile():
            return [StoredFile(str(status.getPath().toString()), "", int(status.getLen()))]
        root = str(status.getPath().toString()).rstrip("/") + "/"
        found = []
        listing = fs.listFiles(path, True)  # one flat listing on object stores, not a walk
        while listing.hasNext():
            entry = listing.next()
            name = str(entry.getPath().toString())
            relative = name.removeprefix(root)
            if not any(part.startswith((".", "_")) for part in relative.split("/")):
                found.append(StoredFile(name, relative, int(entry.getLen())))
        return sorted(found, key=lambda f: f.uri)

    def read_bytes(self, uri: str) -> bytes:
        fs, path = self._fs_path(uri)
        stream = fs.open(path)
        try:
            return bytes(stream.readAllBytes())
        finally:
            stream.close()

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Creates (or replaces) the file, and the folders above it. On an object store the object
        appears whole when it is closed."""
        fs, path = self._fs_path(uri)
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode("utf-8"))

    def delete(self, uri: str) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.delete(path, True))
