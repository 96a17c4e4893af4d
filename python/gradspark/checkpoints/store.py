"""Checkpoint files through Hadoop's FileSystem API (file://, hdfs://, s3a://, ...).

Each checkpoint is written under a temporary name and renamed into place, so
a crash mid-write never leaves a half-written file under a checkpoint name;
only the newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import List, Optional, Tuple

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext

from gradspark.checkpoints.format import CorruptCheckpointError, TrainingState

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d{10})\.ckpt$")


class CheckpointStore:
    def __init__(self, sc: SparkContext, directory: str, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keepCheckpoints must be >= 1, got {keep}")
        self.keep = keep
        jvm = sc._jvm
        self._jvm = jvm
        self.directory = jvm.org.apache.hadoop.fs.Path(directory)
        self.fs = self.directory.getFileSystem(sc._jsc.hadoopConfiguration())
        self.fs.mkdirs(self.directory)

    def _path(self, name: str):
        return self._jvm.org.apache.hadoop.fs.Path(self.directory, name)

    def steps(self) -> List[int]:
        """Steps of the checkpoints present, oldest first."""
        found = []
        for status in self.fs.listStatus(self.directory):
            match = _NAME.match(status.getPath().getName())
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def write(self, state: TrainingState) -> str:
        data = state.to_bytes()
        final = self._path(f"step-{state.step:010d}.ckpt")
        temporary = self._path(f".tmp-{uuid.uuid4().hex}")
        out = self.fs.create(temporary, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if self.fs.exists(final):
            self.fs.delete(final, False)
        if not self.fs.rename(temporary, final):
            self.fs.delete(temporary, False)
            raise IOError(f"could not rename checkpoint into place: {final.toString()}")
        for old in self.steps()[:-self.keep]:
            self.fs.delete(self._path(f"step-{old:010d}.ckpt"), False)
        return final.toString()

    def read(self, step: int) -> TrainingState:
        try:
            stream = self.fs.open(self._path(f"step-{step:010d}.ckpt"))
            try:
                data = bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()
        except Py4JJavaError as exc:
            # e.g. a ChecksumException: Hadoop's own .crc check caught the damage first
            first_line = str(exc.java_exception.toString()).splitlines()[0]
            raise CorruptCheckpointError(f"unreadable: {first_line}") from None
        return TrainingState.from_bytes(data)

    def latest(self) -> Optional[Tuple[int, TrainingState]]:
        """The newest readable checkpoint; corrupt ones are skipped with a warning."""
        for step in reversed(self.steps()):
            try:
                return step, self.read(step)
            except CorruptCheckpointError as exc:
                logger.warning(
                    "checkpoint step %d in %s is corrupt (%s); trying the previous one",
                    step, self.directory.toString(), exc,
                )
        return None
