"""The regularized training objective of a linear model, in the space the optimizer sees.

``space="standardized"`` (MLlib's): coefficient ``beta_s[j]`` multiplies
``(x_j - mu_j) / sigma_j`` (centering only when an intercept is fitted).
Optimizing there gives MLlib's conditioning, but the data is never rescaled:
the engine is handed the equivalent raw-space map ``B = beta_s / sigma``,
``c = b_s - (mu / sigma) @ beta_s`` and the chain rule is applied here.

``space="raw"``: coefficient ``theta[j]`` multiplies ``x_j`` itself. This is
the space for per-coordinate and mini-batch optimizers on sparse data: in
the standardized space a rare binary feature (``sigma_j ~ sqrt(p_j)``) moves
its raw coefficient by ``lr / sigma_j`` per Adam step, hundreds of times the
step size, and centering gives every coordinate a non-zero gradient in every
mini-batch, so all of them move. Raw coordinates untouched by a mini-batch
get no data gradient. The objective is the same either way: the penalty is
expressed on the same coefficients (see :meth:`LinearObjective.penalty_scale`),
and a feature with ``sigma_j = 0`` has a zero coefficient in both (MLlib's rule).

Layout of ``theta``: ``beta_s`` (d x k, row-major), then k intercepts when
fitted, then the loss's auxiliary parameters (Huber's scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
from scipy.linalg.blas import daxpy, ddot

from gradspark.engine import GradientSums
from gradspark.engine.sums import split_map
from gradspark.losses import Loss

_MIN_AUX = 1e-10  # Huber's scale must stay positive


@dataclass
class LinearObjective:
    engine: object  # anything with .gradient_sums(coef, offset, aux, fraction, seed, step)
    loss: Loss
    num_features: int
    num_outputs: int
    fit_intercept: bool
    features_mean: np.ndarray
    features_std: np.ndarray
    l2: np.ndarray  # per-parameter L2 strength (0 for intercepts and aux)
    l1: np.ndarray  # per-parameter L1 strength
    label_shift: float = 0.0
    label_scale: float = 1.0
    mini_batch_fraction: float = 1.0
    seed: int = 0
    space: str = "standardized"  # or "raw" (see the module docstring)
    # Box constraints make centering unusable: the intercept would then move with every
    # coefficient, and an intercept bound would no longer be a bound on one coordinate.
    center: bool = True
    bounds: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (lower, upper) per parameter

    def __post_init__(self) -> None:
        std = self.features_std
        if self.space not in ("standardized", "raw"):
            raise ValueError(f"unknown parameter space {self.space!r}")
        standardized = self.space == "standardized"
        # inv_std: d raw coefficient / d theta; zero for features that never vary
        scale = std if standardized else np.ones_like(std)
        self.inv_std = np.divide(1.0, scale, out=np.zeros_like(std), where=std > 0)
        self.centered = self.fit_intercept and standardized and self.center
        self.scaled_mean = self.features_mean * self.inv_std if self.centered \
            else np.zeros_like(std)
        self.evaluations = 0

    def penalty_scale(self) -> np.ndarray:
        """``r`` with MLlib's standardized coefficient ``beta_s = r * theta`` per feature: 1 in
        the standardized space, ``sigma`` in the raw one (0 where ``sigma`` is 0)."""
        return self.features_std * self.inv_std

    def curvature_bound(self) -> np.ndarray:
        """Per parameter, a bound on the objective's second derivative along it: the loss's
        curvature times the mean square of what the coefficient multiplies (``(x_j -
        mu_j) / sigma_j`` centered, ``x_j * inv_std_j`` otherwise; 1 for an intercept),
        plus its L2 strength. SVRG's steps are fractions of its inverse."""
        if self.loss.curvature is None or self.loss.num_aux:
            raise ValueError(f"optimizer='svrg' needs a loss with bounded curvature and no "
                             f"parameters of its own; {self.loss.name!r} is not")
        variance = self.features_std ** 2
        square = variance if self.centered else variance + self.features_mean ** 2
        per_feature = self.loss.curvature * square * self.inv_std ** 2
        bound = np.zeros(self.size)
        bound[: self.num_coefficients] = np.repeat(per_feature, self.num_outputs)
        if self.fit_intercept:
            bound[self.num_coefficients: self.num_coefficients + self.num_outputs] = \
                self.loss.curvature
        return bound + self.l2

    # -- layout ---------------------------------------------------------
    @property
    def num_coefficients(self) -> int:
        return self.num_features * self.num_outputs

    @property
    def size(self) -> int:
        k = self.num_outputs if self.fit_intercept else 0
        return self.num_coefficients + k + self.loss.num_aux

    def split(self, theta: np.ndarray):
        d, k = self.num_features, self.num_outputs
        beta = theta[: d * k].reshape(d, k)
        rest = theta[d * k:]
        intercept = rest[:k] if self.fit_intercept else np.zeros(k)
        aux = rest[k:] if self.fit_intercept else rest
        return beta, intercept, aux

    def lower_bounds(self) -> np.ndarray:
        lower = np.full(self.size, -np.inf)
        if self.loss.num_aux:
            lower[-self.loss.num_aux:] = _MIN_AUX
        return lower if self.bounds is None else np.maximum(lower, self.bounds[0])

    def upper_bounds(self) -> np.ndarray:
        return np.full(self.size, np.inf) if self.bounds is None else self.bounds[1]

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Keep parameters inside their domain (first-order optimizers)."""
        if self.bounds is None:
            return np.maximum(theta, self.lower_bounds())
        return np.clip(theta, self.lower_bounds(), self.upper_bounds())

    def constrain(self, coefficients: Tuple[np.ndarray, np.ndarray],
                  intercepts: Tuple[np.ndarray, np.ndarray]) -> None:
        """Set box constraints given in the input's units: (lower, upper) coefficients
        (d x k each) and intercepts (k each). A coefficient is
        ``label_scale * inv_std * theta`` (positive factors), so each bound is a bound on
        one coordinate of theta; a feature that never varies keeps a zero coefficient and
        no bound."""
        if self.centered:
            raise ValueError("box constraints need an uncentered objective (center=False)")
        d, k = self.num_features, self.num_outputs
        factor = (self.label_scale * self.inv_std)[:, None]
        lower, upper = np.full(self.size, -np.inf), np.full(self.size, np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            lower[: d * k] = np.where(factor > 0, coefficients[0] / factor, -np.inf).ravel()
            upper[: d * k] = np.where(factor > 0, coefficients[1] / factor, np.inf).ravel()
        if self.fit_intercept:
            lower[d * k: d * k + k] = (intercepts[0] - self.label_shift) / self.label_scale
            upper[d * k: d * k + k] = (intercepts[1] - self.label_shift) / self.label_scale
        self.bounds = (lower, upper)

    # -- the raw-space linear map ----------------------------------------
    def linear_map(self, theta: np.ndarray):
        beta, intercept, aux = self.split(theta)
        coef = beta * self.inv_std[:, None]
        offset = intercept - self.scaled_mean @ beta if self.centered else intercept
        return coef, offset, aux

    def original_space(self, theta: np.ndarray):
        """(coefficients d x k, intercepts k, aux) in the units of the input data."""
        coef, offset, aux = self.linear_map(theta)
        coefficients = self.label_scale * coef
        intercepts = (self.label_scale * offset + self.label_shift) if self.fit_intercept \
            else np.zeros(self.num_outputs)
        return coefficients, intercepts, aux

    def from_original_space(self, coefficients: np.ndarray, intercepts: np.ndarray,
                            aux: np.ndarray) -> np.ndarray:
        """The theta whose :meth:`original_space` is the given model (a warm start);
        features that never vary get a zero coefficient, as in every fit."""
        d, k = self.num_features, self.num_outputs
        factor = (self.label_scale * self.inv_std)[:, None]
        beta = np.divide(coefficients, factor, out=np.zeros((d, k)), where=factor > 0)
        theta = self.initial()
        theta[: d * k] = beta.ravel()
        if self.fit_intercept:
            offset = (np.asarray(intercepts) - self.label_shift) / self.label_scale
            theta[d * k: d * k + k] = offset + self.scaled_mean @ beta if self.centered \
                else offset
        if self.loss.num_aux and len(aux):
            theta[-self.loss.num_aux:] = aux
        return theta

    # -- value and gradient ---------------------------------------------
    def data_term(self, theta: np.ndarray, step: Optional[int] = None):
        """Weighted mean loss and its gradient; a mini-batch sample when step is given."""
        coef, offset, aux = self.linear_map(theta)
        sampled = step is not None and self.mini_batch_fraction < 1.0
        sums: Optional[GradientSums] = self.engine.gradient_sums(
            coef, offset, aux,
            fraction=self.mini_batch_fraction if sampled else 1.0,
            seed=self.seed, step=step or 0,
        )
        self.evaluations += 1
        return self.data_term_from_sums(theta, sums)

    def data_term_from_sums(self, theta: np.ndarray, sums: Optional[GradientSums]):
        """Weighted mean loss and gradient w.r.t. ``theta`` from raw-space sums."""
        if sums is None or sums.weight_sum <= 0:
            return 0.0, np.zeros_like(theta)  # an empty mini-batch moves nothing
        # Written into one array in place: at ~10^6 features each temporary is a pass
        # over memory, and the driver makes these between two rounds of the workers.
        # Centered, ``(xtg - mean gsum) inv_std`` is formed as ``xtg inv_std -
        # scaled_mean gsum``: three passes instead of five (6.8 against 15.0 ms a call
        # inside resident fits at ctr 2^22, cProfile).
        d, k = self.num_features, self.num_outputs
        grad = np.empty(self.size)
        coef = grad[: d * k].reshape(d, k)
        np.multiply(sums.xtg, self.inv_std[:, None], out=coef)
        if self.centered:
            if k == 1:  # in place (grad is contiguous): one pass, no temporary
                daxpy(self.scaled_mean, grad[:d], a=-float(sums.gsum[0]))
            else:
                coef -= np.outer(self.scaled_mean, sums.gsum)
        if self.fit_intercept:
            grad[d * k: d * k + k] = sums.gsum
        grad[self.size - len(sums.d_aux):] = sums.d_aux
        grad /= sums.weight_sum
        return sums.loss_sum / sums.weight_sum, grad

    # -- the sums as compression should see them ------------------------
    def sums_to_theta_space(self, vector: np.ndarray) -> np.ndarray:
        """Raw-space sums ``(xtg, gsum, d_aux)`` with ``xtg`` centered (when an intercept is
        fitted) and scaled as in the gradient w.r.t. ``theta``.

        Lossy compression works on this form: its magnitudes are the
        optimizer's, so top-k keeps the coordinates that move the weights, and
        a centered ``xtg`` does not depend on ``gsum`` arriving in the same message.
        """
        xtg, gsum, d_aux = split_map(vector, self.num_features, self.num_outputs)
        if self.centered:
            xtg = xtg - np.outer(self.features_mean, gsum)
        return np.concatenate([(xtg * self.inv_std[:, None]).ravel(), gsum, d_aux])

    def sums_from_theta_space(self, vector: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`sums_to_theta_space` (zero for constant features, whose
        gradient is zero either way)."""
        xtg, gsum, d_aux = split_map(vector, self.num_features, self.num_outputs)
        scale = np.divide(1.0, self.inv_std, out=np.zeros_like(self.inv_std),
                          where=self.inv_std > 0)
        xtg = xtg * scale[:, None]
        if self.centered:
            xtg = xtg + np.outer(self.features_mean, gsum)
        return np.concatenate([xtg.ravel(), gsum, d_aux])

    def smooth(self, theta: np.ndarray, step: Optional[int] = None):
        """Data term plus L2 (everything but the L1 part)."""
        return self._add_l2_into(theta, *self.data_term(theta, step))

    def smooth_from_sums(self, theta: np.ndarray, sums: Optional[GradientSums]):
        """:meth:`smooth` from sums computed elsewhere (the parameter server's workers)."""
        return self._add_l2_into(theta, *self.data_term_from_sums(theta, sums))

    def add_l2(self, theta: np.ndarray, value: float, grad: np.ndarray):
        """The data term's value and gradient plus the L2 penalty's, at ``theta``."""
        return self._add_l2_into(theta, value, np.array(grad, dtype=np.float64))

    def _add_l2_into(self, theta: np.ndarray, value: float, grad: np.ndarray):
        """:meth:`add_l2`, adding into ``grad`` (the data term's own fresh array): the
        penalty's gradient ``l2 theta`` once, its value ``0.5 (l2 theta) . theta`` from
        it (three passes over memory, not four and two temporaries)."""
        penalty_grad = np.multiply(self.l2, theta)
        grad += penalty_grad
        return value + 0.5 * float(ddot(penalty_grad, theta)), grad

    # -- the wire form of the linear map (parameter server <-> workers) ----
    def map_vector(self, theta: np.ndarray) -> np.ndarray:
        coef, offset, aux = self.linear_map(theta)
        return np.concatenate([coef.ravel(), offset, aux])

    @property
    def map_size(self) -> int:
        return self.num_coefficients + self.num_outputs + self.loss.num_aux

    def l1_penalty(self, theta: np.ndarray) -> float:
        return float(self.l1 @ np.abs(theta))

    def initial(self, intercepts: Optional[np.ndarray] = None) -> np.ndarray:
        theta = np.zeros(self.size)
        if self.fit_intercept and intercepts is not None:
            theta[self.num_coefficients: self.num_coefficients + self.num_outputs] = intercepts
        if self.loss.num_aux:
            theta[-self.loss.num_aux:] = self.loss.initial_aux()
        return theta
