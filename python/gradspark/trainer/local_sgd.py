"""Local SGD (periodic model averaging) on resident workers: ``localSteps = k``.

Each round the driver publishes the weights ``theta``; every worker takes
``k`` plain gradient steps on its own rows and answers with its model change
(times its rows' weight sum). Step ``t`` of a round is global step ``t``: it
samples the mini-batch sync mode would sample at ``t`` (``(seed, t,
partition)``), uses the learning rate of ``t``, and includes the L2 term.
The driver averages the changes, weighted by the rows' weights, and hands
``-average / lr`` to its optimizer as the round's gradient (FedOpt, Reddi
et al. 2021). With ``optimizer='sgd'`` that is plain model averaging (Stich
2019, "Local SGD converges fast and communicates little"); with Adam or
Adagrad the driver adapts the averaged direction. ``k = 1`` is exactly
sync mode for every optimizer (up to rounding): one round is one step.

What changes with ``k > 1``:

* a round costs one message exchange for ``k`` steps of every worker, so a
  fit of ``maxIter`` steps exchanges ``ceil(maxIter / k)`` times;
* the workers' steps between exchanges follow their own data only, so the
  result drifts from sync's as the partitions differ (shuffled data drifts
  least);
* L1 is applied by the driver, once per round with ``k`` times the
  per-step strength (the local steps take the smooth part only), which
  keeps the lasso's fixed point;
* the loss history has one entry per round: the weighted mean loss at the
  round's starting weights (exact for full batches);
* the workers' local steps are stateless (plain SGD), so a resumed fit
  repeats exactly what the interrupted one would have done.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from gradspark.checkpoints import TrainingCheckpoints
from gradspark.engine.resident import ResidentGradientEngine
from gradspark.engine.rounds import Answer, RoundCode
from gradspark.engine.worker_step import WorkerStep
from gradspark.optim import learning_rate
from gradspark.trainer.objective import LinearObjective
from gradspark.integrations.progress import Progress
from gradspark.trainer.sync import SyncConfig, TrainingResult, check_finite, small_step
from gradspark.trainer.step_book import StepBook


@dataclasses.dataclass(frozen=True)
class LocalSGDResponse:
    """A worker's answer to a round: ``k`` local steps from the published weights.

    A ``respond`` function for :class:`ResidentGradientEngine`; picklable.
    """

    objective: LinearObjective  # with engine=None: only its layout, scaling and L2
    step_size: float
    schedule: str
    max_iter: int
    local_steps: int
    faults: object = None

    @classmethod
    def of(cls, objective: LinearObjective, config: SyncConfig, faults=None):
        return cls(dataclasses.replace(objective, engine=None), config.step_size,
                   config.schedule, config.max_iter, config.local_steps, faults)

    @property
    def answer_size(self) -> int:
        return self.objective.size

    @property
    def step(self) -> WorkerStep:
        objective = self.objective
        return WorkerStep(objective.loss, objective.num_features, objective.num_outputs,
                          objective.mini_batch_fraction, objective.seed & 0xFFFFFFFF,
                          self.faults)

    def __call__(self, request, groups, attempt: int) -> Answer:
        code = RoundCode.decode(request.version)
        first, sampled = code.step, code.sampled
        objective, worker_step = self.objective, self.step
        fraction = objective.mini_batch_fraction if sampled else 1.0
        start = request.vector
        theta = start.copy()
        first_sums = None
        for step in range(first, min(first + self.local_steps, self.max_iter)):
            worker_step.before(groups, step, attempt)
            coef, offset, aux = objective.linear_map(theta)
            sums = worker_step.partial_sums(groups, coef, offset, aux, step, fraction)
            if step == first:
                first_sums = sums
            _, grad = objective.smooth_from_sums(theta, sums)
            lr = learning_rate(self.schedule, self.step_size, step, self.max_iter)
            theta = objective.project(theta - lr * grad)
        if first_sums is None or first_sums.weight_sum <= 0:
            return Answer(np.zeros_like(start), 0.0, 0.0, 0)  # no rows: no say in the average
        weight = first_sums.weight_sum
        return Answer(weight * (theta - start), first_sums.loss_sum, weight, first_sums.count)


def train_local_sgd(
    objective: LinearObjective,
    theta0: np.ndarray,
    config: SyncConfig,
    engine: ResidentGradientEngine,
    checkpoints: Optional[TrainingCheckpoints] = None,
) -> TrainingResult:
    """Rounds of ``config.local_steps`` local steps until ``config.max_iter`` steps.

    ``engine`` must be started with ``respond=LocalSGDResponse.of(objective, config)``.
    """
    k = config.local_steps
    # dense: a pseudo-gradient (averaged local moves) is not data + l2 * theta
    optimizer = config.first_order()
    book = StepBook.open(optimizer, theta0, checkpoints.resume_state() if checkpoints else None)
    theta, state, step, converged = book.theta, book.state, book.step, book.converged
    history, rounds = book.history, 0
    sampled = objective.mini_batch_fraction < 1.0
    progress = Progress(config.max_iter, config.label)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            while step < config.max_iter and not converged:
                first, steps = step, min(k, config.max_iter - step)
                answer = engine.exchange(theta, RoundCode(first, sampled).encode())
                objective.evaluations += steps
                rounds += 1
                step += steps
                if answer.weight_sum <= 0:
                    continue  # every worker's sample was empty: nothing to average
                loss = (answer.loss_sum / answer.weight_sum + 0.5 * float(objective.l2 @ theta**2)
                        + objective.l1_penalty(theta))
                history.append(loss)
                progress.update(step, loss)
                if not np.isfinite(loss):
                    break
                lr = learning_rate(config.schedule, config.step_size, first, config.max_iter)
                pseudo_gradient = -answer.vector / answer.weight_sum / lr
                new_theta, state = optimizer.update(theta, pseudo_gradient, state, lr,
                                                    objective.l1 * steps)
                new_theta = objective.project(new_theta)
                converged = small_step(theta, new_theta, config.tol)
                theta = new_theta
                if checkpoints and (converged or step >= config.max_iter
                                    or first // checkpoints.interval
                                    != step // checkpoints.interval):
                    checkpoints.save(step, theta, state, history, converged)
    finally:
        progress.close()
    book.close_step(step, theta, state, converged)
    result = book.result({"localSteps": k, "averagingRounds": rounds})
    check_finite(result, config)
    return result
