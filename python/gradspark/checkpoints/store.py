"""Where checkpoint files live: Hadoop's FileSystem API, or ``pyarrow.fs`` on Spark Connect.

Each checkpoint is written under a temporary name and renamed into place, so
a crash mid-write never leaves a half-written file under a checkpoint name;
only the newest ``keep`` checkpoints are kept.

The driver writes them. A classic session reaches every Hadoop file system
(``file://``, ``hdfs://``, ``s3a://``, ...) through the JVM
(:class:`CheckpointStore`); a Spark Connect client has no JVM, so it writes
through ``pyarrow.fs`` (:class:`ArrowCheckpointStore`: local and mounted
paths, ``hdfs://`` with libhdfs, ``s3://``, ``gs://``).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import List, Optional, Tuple

from gradspark.checkpoints.format import (
    CheckpointWriteError,
    CorruptCheckpointError,
    TrainingState,
)

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^step-(\d{10})\.ckpt$")


def _file_name(step: int) -> str:
    return f"step-{step:010d}.ckpt"


class CheckpointFiles:
    """Naming, pruning and finding checkpoints; subclasses move the bytes."""

    location: str  # the directory, for messages

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keepCheckpoints must be >= 1, got {keep}")
        self.keep = keep
        # The checkpoints this fit wrote (or resumed from), oldest first: the only ones
        # pruning may delete. Files of other runs, or unreadable ones, are never touched.
        self.own: List[int] = []

    # -- what a file system provides
    def _names(self) -> List[str]:
        raise NotImplementedError

    def _put(self, temporary: str, final: str, data: bytes) -> str:
        """Write ``data`` to ``temporary``, rename it to ``final``; return final's URI."""
        raise NotImplementedError

    def _get(self, name: str) -> bytes:
        raise NotImplementedError

    def _delete(self, name: str) -> None:
        raise NotImplementedError

    # -- checkpoints
    def steps(self) -> List[int]:
        """Steps of the checkpoints present, oldest first."""
        found = (_NAME.match(name) for name in self._names())
        return sorted(int(match.group(1)) for match in found if match)

    def write(self, state: TrainingState) -> str:
        """Write ``state`` (to a temporary name, then renamed), then prune this fit's
        older checkpoints beyond ``keep``; never the one just written, never another
        run's. A failed write removes its temporary file and raises
        :class:`CheckpointWriteError` naming the path and the cause."""
        temporary = f".tmp-{uuid.uuid4().hex}"
        try:
            where = self._put(temporary, _file_name(state.step), state.to_bytes())
        except Exception as cause:  # noqa: BLE001 - Py4JJavaError, OSError, ...
            try:
                self._delete(temporary)
            except Exception:  # noqa: BLE001 - the write's failure is the one to report
                logger.warning("could not remove %s/%s", self.location, temporary)
            text = str(getattr(cause, "java_exception", cause)).strip().splitlines()
            raise CheckpointWriteError(
                f"could not write checkpoint step {state.step} to {self.location}: "
                f"{type(cause).__name__}: {text[0] if text else ''}") from None
        self.own = [step for step in self.own if step != state.step] + [state.step]
        for old in self.own[:-self.keep]:
            try:
                self._delete(_file_name(old))
            except Exception as problem:  # noqa: BLE001 - a stale file is not worth a fit
                logger.warning("could not prune checkpoint step %d in %s: %s", old,
                               self.location, problem)
        self.own = self.own[-self.keep:]
        return where

    def adopt(self, step: int) -> None:
        """Count a checkpoint this fit resumed from as its own (pruned in turn)."""
        if step not in self.own:
            self.own.insert(0, step)

    def read(self, step: int) -> TrainingState:
        return TrainingState.from_bytes(self._get(_file_name(step)))

    def latest(self) -> Optional[Tuple[int, TrainingState]]:
        """The newest readable checkpoint; corrupt ones are skipped with a warning."""
        for step in reversed(self.steps()):
            try:
                return step, self.read(step)
            except CorruptCheckpointError as exc:
                logger.warning(
                    "checkpoint step %d in %s is corrupt (%s); trying the previous one",
                    step, self.location, exc,
                )
        return None


class CheckpointStore(CheckpointFiles):
    """Checkpoints through the driver JVM's Hadoop FileSystem (a classic session)."""

    def __init__(self, sc, directory: str, keep: int = 3) -> None:
        super().__init__(keep)
        self._jvm = sc._jvm
        self.directory = self._jvm.org.apache.hadoop.fs.Path(directory)
        self.location = self.directory.toString()
        self.fs = self.directory.getFileSystem(sc._jsc.hadoopConfiguration())
        self.fs.mkdirs(self.directory)

    def _path(self, name: str):
        return self._jvm.org.apache.hadoop.fs.Path(self.directory, name)

    def _names(self) -> List[str]:
        return [status.getPath().getName() for status in self.fs.listStatus(self.directory)]

    def _put(self, temporary: str, final: str, data: bytes) -> str:
        temporary, final = self._path(temporary), self._path(final)
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
        return final.toString()

    def _get(self, name: str) -> bytes:
        from py4j.protocol import Py4JJavaError

        try:
            stream = self.fs.open(self._path(name))
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()
        except Py4JJavaError as exc:
            # e.g. a ChecksumException: Hadoop's own .crc check caught the damage first
            first_line = str(exc.java_exception.toString()).splitlines()[0]
            raise CorruptCheckpointError(f"unreadable: {first_line}") from None

    def _delete(self, name: str) -> None:
        self.fs.delete(self._path(name), False)


class ArrowCheckpointStore(CheckpointFiles):
    """Checkpoints through ``pyarrow.fs``, from this process (a Spark Connect client)."""

    def __init__(self, directory: str, keep: int = 3) -> None:
        import pyarrow.fs as pafs

        from gradspark.checkpoints.epochs import normalize_directory

        super().__init__(keep)
        self.location = normalize_directory(directory)
        self.fs, self.root = pafs.FileSystem.from_uri(self.location)
        self.fs.create_dir(self.root, recursive=True)

    def _names(self) -> List[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return [info.base_name for info in infos]

    def _put(self, temporary: str, final: str, data: bytes) -> str:
        temporary, final = f"{self.root}/{temporary}", f"{self.root}/{final}"
        with self.fs.open_output_stream(temporary) as out:
            out.write(data)
        self.fs.move(temporary, final)  # replaces an existing file
        return final

    def _get(self, name: str) -> bytes:
        try:
            with self.fs.open_input_stream(f"{self.root}/{name}") as stream:
                return stream.read()
        except OSError as exc:
            raise CorruptCheckpointError(f"unreadable: {exc}") from None

    def _delete(self, name: str) -> None:
        try:
            self.fs.delete_file(f"{self.root}/{name}")
        except FileNotFoundError:
            pass


def checkpoint_store(spark, directory: str, keep: int) -> CheckpointFiles:
    """The store a session's driver writes checkpoints with (see the module docs)."""
    from gradspark.connect import is_connect

    if is_connect(spark):
        return ArrowCheckpointStore(directory, keep)
    return CheckpointStore(spark.sparkContext, directory, keep)
