"""Sharded checkpoints: ``torch.distributed.checkpoint`` (DCP) files written through ``pyarrow.fs``.

With ``checkpointFormat="sharded"`` (the default under ``strategy="fsdp"``)
every rank writes its own shard of the parameters and optimizer state, in
parallel, to one ``__<rank>_0.distcp`` file; rank 0 adds DCP's ``.metadata``
(which tensor chunk lies where). Nothing is gathered to one process, and
DCP reshards on load, so the files load into any number of ranks (and into
DDP's whole modules).

DCP's own writers speak local paths (``FileSystemWriter``) or fsspec
(``FsspecWriter``); our epoch checkpoints go through ``pyarrow.fs`` (local,
``hdfs://``, ``s3://``, ``gs://``, see :mod:`gradspark.checkpoints.epochs`),
so :class:`ArrowFileSystem` gives DCP's file writer and reader that same
backend instead of adding fsspec as a dependency.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from typing import Any, Dict, Iterator

import pyarrow.fs as pafs
from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
)


class ArrowFileSystem(FileSystemBase):
    """DCP's file operations on one ``pyarrow.fs.FileSystem`` (paths are that file
    system's, without the scheme)."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs

    @contextmanager
    def create_stream(self, path, mode: str) -> Iterator[io.IOBase]:
        if "w" in mode:
            with self.fs.open_output_stream(str(path)) as stream:
                yield stream
        else:  # DCP seeks to each tensor's offset in a shard file
            with self.fs.open_input_file(str(path)) as stream:
                yield stream

    def concat_path(self, path, suffix: str) -> str:
        return f"{str(path).rstrip('/')}/{suffix}"

    def rename(self, path, new_path) -> None:
        self.fs.move(str(path), str(new_path))  # replaces an existing file

    def init_path(self, path) -> str:
        return str(path)

    def mkdir(self, path) -> None:
        self.fs.create_dir(str(path), recursive=True)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return True  # only ever handed to DCP as an explicit storage writer/reader

    def exists(self, path) -> bool:
        return self.fs.get_file_info(str(path)).type != pafs.FileType.NotFound

    def rm_file(self, path) -> None:
        self.fs.delete_file(str(path))


class ArrowShardWriter(FileSystemWriter):
    """DCP's file writer (one file per rank) on a ``pyarrow.fs`` file system."""

    def __init__(self, fs: pafs.FileSystem, directory: str) -> None:
        # sync_files=False: an fsync needs a file descriptor, which pyarrow's streams do
        # not expose; durability is the file system's, as for full checkpoints. (The
        # marker written after every shard guards against killed processes, not lost
        # power: gradspark.checkpoints.epochs.)
        super().__init__(directory, single_file_per_rank=True, sync_files=False)
        self.fs = ArrowFileSystem(fs)
        self.path = directory


class ArrowShardReader(FileSystemReader):
    """DCP's file reader on a ``pyarrow.fs`` file system."""

    def __init__(self, fs: pafs.FileSystem, directory: str) -> None:
        super().__init__(directory)
        self.fs = ArrowFileSystem(fs)
        self.path = directory


def save_shards(fs: pafs.FileSystem, directory: str, state: Dict[str, Any]) -> None:
    """Every rank writes its shards of ``state`` (a collective: all ranks call it)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, storage_writer=ArrowShardWriter(fs, directory))


def load_shards(fs: pafs.FileSystem, directory: str, state: Dict[str, Any]) -> None:
    """Fill ``state`` in place (its tensors say which chunks this rank needs; all
    ranks call it)."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, storage_reader=ArrowShardReader(fs, directory))
