"""The driver's BLAS on one thread while a fit trains.

The driver's work between two evaluations (L-BFGS's two-loop, the
objective's vector arithmetic, an optimizer's update) is a few passes over
feature-sized vectors: bound by memory bandwidth, so a second BLAS thread
hardly speeds it up, and OpenBLAS's threads keep spinning after each call.
On a machine whose cores the executors share (``local[N]``, or a driver on a
worker node) the spinning threads took those cores from the workers:
resident L-BFGS on 200,000 rows at 2^20 features, ``local[2]``, took 5.91 s
a fit with two BLAS threads and 4.30 s with one; the two-loop itself took
30 and 26 ms (medians of 4 fits each, alternating, one session).

OpenBLAS has one thread pool per process, and threadpoolctl lets one Python
thread at a time limit it: limits set and restored from several threads that
overlap would leave the process with another setting than its own (the last
fit to end restores what the first one set). So only a fit on the main thread
limits BLAS; fits started from other threads (concurrent fits) train with the
process's setting. Either way the process keeps its own setting afterwards.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS on one thread for the block, when it runs on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
