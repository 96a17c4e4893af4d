"""What is at a path, on any file system Spark reads: Hadoop's FileSystem API through the
JVM on classic sessions, ``pyarrow.fs`` on Spark Connect clients (no py4j there).

Callers ask before they write, so that nothing the user did not ask to replace is
replaced (the CLI's ``--output``, ``saveAsMLlib``).
"""

from __future__ import annotations

import os
from typing import List, Optional

from pyspark.sql import SparkSession

from gradspark.connect import is_connect


def entries(spark: SparkSession, path: str) -> Optional[List[str]]:
    """The names directly under ``path`` (``[]``: an empty directory; ``[name]`` for a
    file: itself), or None when nothing is there."""
    if is_connect(spark):
        import pyarrow.fs as pafs

        fs, inner = pafs.FileSystem.from_uri(path if "://" in path else
                                             f"file://{os.path.abspath(path)}")
        info = fs.get_file_info(inner)
        if info.type == pafs.FileType.NotFound:
            return None
        if info.type != pafs.FileType.Directory:
            return [info.base_name]
        return [i.base_name for i in fs.get_file_info(pafs.FileSelector(inner))]
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(target):
        return None
    if not fs.getFileStatus(target).isDirectory():
        return [target.getName()]
    return [status.getPath().getName() for status in fs.listStatus(target)]


def same_location(a: str, b: str) -> bool:
    """Whether two user-given paths name the same place (local paths resolved, links
    followed; URIs compared as written, without a trailing slash)."""
    def normal(path: str) -> str:
        if path.startswith("file:"):
            path = path[len("file:"):].lstrip("/")
            path = "/" + path
        if "://" in path:
            return path.rstrip("/")
        return os.path.realpath(os.path.abspath(path))

    return normal(a) == normal(b)
