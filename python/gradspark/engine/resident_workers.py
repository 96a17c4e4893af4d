"""What a resident worker runs: the answer to a round (:class:`GradientResponse`, built
on the shared :class:`~gradspark.engine.worker_step.WorkerStep`), its loop
(:func:`serve_rounds`) and, for ``aggregationTopology="tree"``, the tree of
workers that relay their children's answers (:class:`Tree`, :func:`tree_task`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import List, Optional

from gradspark.comm.compression import Compression, Encoded
from gradspark.engine.rounds import Answer, GradientRounds, RoundCode
from gradspark.engine.touched import TouchedBatch, TouchedFeatures
from gradspark.engine.worker_step import WorkerStep, scalars_of
from gradspark.rpc import ParameterClient, ParameterServer
from gradspark.stages.sources import by_partition


@dataclass(frozen=True)
class Tree:
    """Fan-in tree over workers 0..n-1 in heap order; worker 0 talks to the driver.

    The fan-in follows ``treeAggregate``'s rule for ``aggregationDepth``:
    ``max(2, ceil(n ** (1 / depth)))``.
    """

    num_workers: int
    fan_in: int

    @classmethod
    def for_depth(cls, num_workers: int, depth: int) -> "Tree":
        return cls(num_workers, max(2, math.ceil(num_workers ** (1.0 / max(depth, 1)))))

    def parent(self, worker: int) -> Optional[int]:
        return None if worker == 0 else (worker - 1) // self.fan_in

    def children(self, worker: int) -> List[int]:
        first = self.fan_in * worker + 1
        return list(range(first, min(first + self.fan_in, self.num_workers)))

    def depth(self) -> int:
        """Levels from the root to the deepest worker (the last one, in heap order)."""
        levels, worker = 1, self.num_workers - 1
        while worker > 0:
            worker, levels = self.parent(worker), levels + 1
        return levels


@dataclass(frozen=True)
class GradientResponse:
    """A worker's answer to a gradient round: the sums of its rows at the published map.

    Picklable; it travels to the workers in the stage's closure. Every
    ``respond`` function (see also :mod:`gradspark.trainer.local_sgd`) takes
    ``(request, groups, attempt)`` and returns an :class:`Answer`.
    """

    step: WorkerStep
    sparse_pull: bool = False  # see touched() and gradspark.engine.touched

    @property
    def answer_size(self) -> int:
        return self.step.answer_size

    def hold(self, groups):
        """The worker's blocks as it keeps them for the fit (see :meth:`WorkerStep.hold`)."""
        return self.step.hold(groups)

    def touched(self, groups) -> Optional[TouchedFeatures]:
        """A worker's source of sparse-pull batches (None: it pulls the whole vector)."""
        return self.step.touched(groups) if self.sparse_pull else None

    def batch(self, touched: TouchedFeatures, code: int) -> Optional[TouchedBatch]:
        """The rows of the round with ``code`` (a :class:`RoundCode`), over their features."""
        round_code = RoundCode.decode(code)
        return self.step.sample(touched, round_code.step,
                                round_code.fraction(self.step.fraction))

    def first_code(self) -> int:
        """What a worker expects its first round to be: step 0, sampled if it samples."""
        return RoundCode(0, self.step.fraction < 1.0).encode()

    def __call__(self, request, groups, attempt: int,
                 batch: Optional[TouchedBatch] = None) -> Answer:
        """The answer; over ``batch``'s keys (``request.vector`` holds their values) when
        given, as an Encoded message unless lossy compression needs the whole vector."""
        code = RoundCode.decode(request.version)
        step, fraction = code.step, code.fraction(self.step.fraction)
        # Throughput batching: sums weighted by the inverse inclusion probability, relative
        # to the configured fraction (1 when this worker samples at that fraction).
        weight = self.step.fraction / fraction if code.fraction_units else 1.0
        self.step.before(groups, step, attempt)
        sums = self.step.sums(groups, request.vector, step, batch, fraction, weight)
        self.step.after(groups, step, sums)
        return Answer(self.step.encode(sums, batch), *scalars_of(sums))


def serve_rounds(client: ParameterClient, groups, respond, compression: Compression,
                 relay: Optional[GradientRounds] = None, timeout: float = 300.0) -> int:
    """A resident worker's loop: take a round's request, answer it (compressed).

    With ``relay`` (an inner node of a tree) the round is passed on to the
    children first, and the answer is this worker's plus theirs. The
    attempt (for fault injection) is what the upstream's welcome said.
    """
    answered = 0
    attempt = client.start_clock
    compress = compression.new()  # this worker's error-feedback residual lives here
    if hasattr(respond, "hold"):
        groups = respond.hold(groups)
    # Sparse pulls (a leaf's gradient answers): the keys go with the pull, so the worker
    # samples the round it expects next; a reply for another round is pulled again. The
    # last answered batch is kept: SVRG asks for each batch twice (at the weights and at
    # its snapshot), and resampling it took twice as long as the round itself.
    touched = respond.touched(groups) if relay is None and hasattr(respond, "touched") \
        else None
    expected = respond.first_code() if touched is not None else 0
    last_code, last_batch = None, None
    if relay is not None:
        relay.set_attempt(attempt)
    try:
        while True:
            batch = None if touched is None else last_batch if expected == last_code \
                else respond.batch(touched, expected)
            request = client.pull(None if batch is None else batch.keys)
            if request.stop:
                break
            if batch is not None and (RoundCode.decode(request.version).rows()
                                      != RoundCode.decode(expected).rows()):
                expected = request.version
                continue
            if relay is not None:
                relay.publish(request.clock, request.vector, request.version)
            answer = respond(request, groups, attempt, batch) if batch is not None else \
                respond(request, groups, attempt)
            if relay is not None:
                answer = answer + relay.collect(timeout)
            message = answer.vector if isinstance(answer.vector, Encoded) else \
                compress(answer.vector)
            client.push(request.clock, request.version, answer.loss_sum, answer.weight_sum,
                        answer.count, message)
            answered += 1
            last_code, last_batch = request.version, batch
            expected = RoundCode.decode(request.version).next_sampled()
        client.done()
    finally:
        if relay is not None:
            relay.stop()
            relay.drain(timeout)
    return answered


def tree_task(driver_address, secret: bytes, tree: Tree, loopback: bool, respond,
              compression: Compression, timeout: float, encrypt: bool = False):
    """The barrier task of one tree node: relay server, address exchange, then the loop."""

    def run(worker: int, tagged):
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        groups = by_partition(tagged)
        children = tree.children(worker)
        relay = server = None
        try:
            if children:
                relay = GradientRounds(children, respond.answer_size, relay=True)
                host = "127.0.0.1" if loopback else \
                    ctx.getTaskInfos()[worker].address.rsplit(":", 1)[0]
                server = ParameterServer(relay, host, tree.num_workers, secret,
                                         encrypt=encrypt)
            addresses = ctx.allGather(json.dumps(server.address if server else None))
            parent = tree.parent(worker)
            upstream = tuple(driver_address) if parent is None else \
                tuple(json.loads(addresses[parent]))
            with ParameterClient(upstream, secret, worker, ctx.attemptNumber()) as client:
                answered = serve_rounds(client, groups, respond, compression, relay=relay,
                                        timeout=timeout)
        finally:
            if relay is not None:
                relay.stop()  # children waiting in a hello or a pull hear it (no-op if done)
            if server is not None:
                server.close()
        yield worker, ctx.attemptNumber(), answered

    return run


