"""Problems of the peer-to-peer mode: data split over the nodes, the loss and
penalty, and the centralized convex reference x* (docs/algorithms.md, sections 3 and 4).

Every node i holds (A_i, y_i) with rows clipped to ||a_ij|| <= c1 and the local
objective of docs/algorithms.md, section 0, f_i(x) = (1/m_i) sum_j l(x; a_ij, y_ij) + (lam/N) P(x)
(:class:`fdp_flower.algorithms.fdp_admm.update.Objective`), so that sum_i f_i is the centralized
problem whose minimizer x* defines the normalized error ||x_i - x*|| / ||x*||.

Gauthier et al.'s (2023) problems (Sec. 5; Boyd et al. 2010): elastic net (squared loss +
lam (lam2 ||x||^2 + lam1 ||x||_1)), least absolute deviation (|y - a.x|, no
penalty) and ridge (squared loss + lam ||x||^2 / 2), on synthetic data
y = A x0 + noise.  The squared loss clips the residual at R in its gradient
(docs/algorithms.md, section 0, G = c1 R): the problem actually minimized is the Huber loss
with threshold R, and that is what the reference solves.

Ding et al.'s (2019) problem (Sec. V): logistic loss + Lambda ||x||^2 on UCI Adult
(or scikit-learn's breast-cancer data), with train and test accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.fdp_admm.reference import solve_reference
from fdp_flower.algorithms.fdp_admm.update import Objective
from fdp_flower.core.clipping import clip_rows
from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss, SquaredLoss
from fdp_flower.core.penalties import Penalty
from fdp_flower.privacy.mechanisms import DATA_STREAM


def data_rng(seed: int) -> np.random.Generator:
    """The generator of a run's data, derived from the run seed only (DATA_STREAM)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(DATA_STREAM,)))


# ---------------------------------------------------------------- curvature
def loss_curvature(loss, w, features, response) -> np.ndarray:
    """Per-sample d^2 l / d(a.w)^2 of a smooth loss (the Hessian is mean_j c_j a_j a_j^T).

    logistic: s (1 - s) with s = 1 / (1 + exp(-y a.w)) (y^2 = 1); squared with
    residual clip R (the Huber loss): 1{|y - a.w| < R}.  Nonsmooth losses raise.
    """
    if isinstance(loss, LogisticLoss):
        margin = response * (features @ w)
        s = np.exp(-np.logaddexp(0.0, -margin))
        return s * (1.0 - s)
    if isinstance(loss, SquaredLoss):
        r = response - features @ w
        return (np.abs(r) < loss.residual_bound).astype(float)
    raise ValueError(f"the {loss.name!r} loss is not smooth; use the linearized step")


def penalty_curvature(penalty: Penalty, dim: int | None = None):
    """The constant Hessian of a smooth penalty, P'' = c I; nonsmooth penalties raise.

    Returns the scalar c, or, when the penalty leaves leading coordinates out
    (``penalty.unpenalized``, an intercept) and ``dim`` is given, the diagonal c mask (dim,).
    """
    if penalty.kind == "none":
        c = 0.0
    elif penalty.kind == "l2":
        c = 1.0
    elif penalty.kind == "elastic_net" and penalty.lam1 == 0:
        c = 2.0 * penalty.lam2
    else:
        raise ValueError(f"the {penalty.kind!r} penalty is not smooth; use the linearized step")
    if penalty.unpenalized and dim is not None:
        return c * penalty.mask(dim)
    return c


def is_smooth(loss, penalty: Penalty) -> bool:
    """True when f_i has a Hessian (logistic/squared loss, none/l2/ridge-type penalty)."""
    try:
        penalty_curvature(penalty)
    except ValueError:
        return False
    return isinstance(loss, (LogisticLoss, SquaredLoss))


# ---------------------------------------------------------------- problem
@dataclass(frozen=True)
class NetworkProblem:
    """Data of N nodes plus the penalized objective and its centralized solution.

    ``features[i]`` is node i's (m_i, K) clipped design, ``responses[i]`` its
    (m_i,) response or labels in {-1, +1}; ``x_star`` the minimizer of
    sum_i f_i (None if not computed).
    """

    name: str
    features: tuple
    responses: tuple
    loss: object
    penalty: Penalty
    lam: float
    c1: float
    x_star: np.ndarray | None = None
    test_features: np.ndarray | None = None
    test_responses: np.ndarray | None = None
    truth: np.ndarray | None = None
    n_clipped: int = 0
    reference_solver: str = ""
    info: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return len(self.features)

    @property
    def dim(self) -> int:
        return self.features[0].shape[1]

    @property
    def sample_counts(self) -> np.ndarray:
        return np.array([len(y) for y in self.responses], dtype=int)

    @property
    def objective(self) -> Objective:
        return Objective(loss=self.loss, penalty=self.penalty, lam=self.lam, num_clients=self.num_nodes)

    @property
    def classification(self) -> bool:
        return isinstance(self.loss, LogisticLoss)

    def gradient_bound(self, *, paper_constants: bool = False) -> float:
        """G (docs/algorithms.md, table (0.3)) for this loss and c1."""
        return float(self.loss.gradient_bound(self.c1, paper_constants=paper_constants))

    def total_objective(self, x) -> float:
        """sum_i f_i(x) for one x of shape (K,)."""
        obj = self.objective
        return float(sum(obj.local_value(x, a, y) for a, y in zip(self.features, self.responses)))

    def normalized_error(self, xs) -> np.ndarray:
        """||x_i - x*|| / ||x*|| for every row of ``xs`` (shape (..., K))."""
        if self.x_star is None:
            raise ValueError(f"problem {self.name!r} has no reference solution x*")
        return np.linalg.norm(np.asarray(xs) - self.x_star, axis=-1) / np.linalg.norm(self.x_star)

    def average_loss(self, xs) -> float:
        """(1/N) sum_i (1/m_i) sum_j l(x_i; a_ij, y_ij) (Ding et al.'s (2019) average loss), xs (N, K)."""
        return float(np.mean([self.loss.mean(x, a, y) for x, a, y in zip(xs, self.features, self.responses)]))

    def accuracy(self, xs, *, test: bool = False) -> np.ndarray:
        """Classification accuracy of every node's x_i: on the pooled training data or the test set."""
        if not self.classification:
            raise ValueError("accuracy is defined for the logistic (classification) problems")
        xs = np.atleast_2d(np.asarray(xs))
        if test:
            a, y = self.test_features, self.test_responses
        else:
            a, y = np.vstack(self.features), np.concatenate(self.responses)
        return np.mean(np.sign(a @ xs.T) == y[:, None], axis=0)


# ---------------------------------------------------------------- references
def solve_smooth_reference(features, responses, loss, penalty: Penalty, lam: float, *,
                           tol: float = 1e-12, max_iter: int = 200) -> np.ndarray:
    """Minimizer of sum_i f_i for a smooth f (logistic/Huber + none/l2/ridge) by damped Newton.

    Stops when ||grad|| <= tol (1 + |obj|); the objective is strongly convex when
    lam P'' > 0, and Newton converges quadratically near the solution.
    """
    obj = Objective(loss=loss, penalty=penalty, lam=lam, num_clients=len(features))
    k = features[0].shape[1]
    pc = penalty_curvature(penalty, k) * lam
    x = np.zeros(k)

    def value(z):
        return sum(float(obj.local_value(z, a, y)) for a, y in zip(features, responses))

    f = value(x)
    for _ in range(max_iter):
        g = sum(obj.local_subgradient(x, a, y) for a, y in zip(features, responses))
        if np.linalg.norm(g) <= tol * (1.0 + abs(f)):
            break
        h = np.diag(pc * np.ones(k)) + sum((a * loss_curvature(loss, x, a, y)[:, None]).T @ a / len(y)
                                 for a, y in zip(features, responses))
        d = np.linalg.solve(h + 1e-14 * np.eye(k), -g)
        t = 1.0
        while t > 1e-10:
            f_new = value(x + t * d)
            if f_new <= f + 1e-4 * t * g @ d or t * np.linalg.norm(d) < 1e-15:
                break
            t *= 0.5
        x, f = x + t * d, f_new
    return x


def solve_elastic_net_reference(features, responses, loss: SquaredLoss, penalty: Penalty, lam: float, *,
                                tol: float = 1e-14, max_iter: int = 200_000) -> np.ndarray:
    """Minimizer of sum_i (1/m_i) sum_j huber_R(y - a.x) + lam (lam2 ||x||^2 + lam1 ||x||_1) by FISTA
    with adaptive restart (prox of the l1 part is soft-thresholding), to ||x_{t+1} - x_t|| <= tol."""
    smooth = Penalty("elastic_net", lam1=0.0, lam2=penalty.lam2, unpenalized=penalty.unpenalized)
    obj = Objective(loss=loss, penalty=smooth, lam=lam, num_clients=len(features))
    lip = sum(np.linalg.norm(a, 2) ** 2 / len(y) for a, y in zip(features, responses)) + 2 * lam * penalty.lam2
    step, thr = 1.0 / lip, lam * penalty.lam1 / lip * penalty.mask(features[0].shape[1])
    x = y_ = np.zeros(features[0].shape[1])
    t = 1.0
    for _ in range(max_iter):
        g = sum(obj.local_subgradient(y_, a, r) for a, r in zip(features, responses))
        z = y_ - step * g
        x_new = np.sign(z) * np.maximum(np.abs(z) - thr, 0.0)
        if np.linalg.norm(x_new - x) <= tol * (1.0 + np.linalg.norm(x)):
            return x_new
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        if (y_ - x_new) @ (x_new - x) > 0:  # restart when momentum points uphill
            t_new, y_ = 1.0, x_new
        else:
            y_ = x_new + ((t - 1) / t_new) * (x_new - x)
        x, t = x_new, t_new
    return x


def reference_solution(features, responses, loss, penalty: Penalty, lam: float) -> tuple[np.ndarray, str]:
    """x* of sum_i f_i and the solver's name: exact LP/QP (fdp_flower.algorithms.fdp_admm.reference) for absolute and
    quantile losses, FISTA for squared + l1-type penalties, Newton for smooth problems."""
    if isinstance(loss, (AbsoluteLoss, QuantileLoss)):
        return solve_reference(list(features), list(responses), loss, penalty, lam).w, "exact-lp-qp"
    if isinstance(loss, SquaredLoss) and penalty.kind in ("elastic_net", "l1"):
        pen = penalty if penalty.kind == "elastic_net" else Penalty("elastic_net", lam1=1.0, lam2=0.0,
                                                                     unpenalized=penalty.unpenalized)
        return solve_elastic_net_reference(features, responses, loss, pen, lam), "fista"
    return solve_smooth_reference(features, responses, loss, penalty, lam), "newton"


# ---------------------------------------------------------------- synthetic (Gauthier et al. 2023)
SYNTHETIC_PROBLEMS = ("elastic_net", "lad", "ridge")


def synthetic_problem(kind: str, *, num_nodes: int, samples_per_node: int = 100, dim: int = 10,
                      noise: float = 0.1, c1: float = 1.5, residual_bound: float = 2.0,
                      lam: float = 0.1, lam1: float = 1.0, lam2: float = 0.5, heterogeneity: float = 0.0,
                      rng: np.random.Generator, with_reference: bool = True, loss=None,
                      penalty: Penalty | None = None) -> NetworkProblem:
    """Synthetic regression of Gauthier et al. (2023), Sec. 5: node i observes y_i = A_i x0 + e_i.

    Parameters
    ----------
    kind : {"elastic_net", "lad", "ridge"}
        elastic net: squared (Huber R) loss + lam (lam2 ||x||^2 + lam1 ||x||_1); LAD: |y - a.x|, no
        penalty, Laplace noise; ridge: squared (Huber R) loss + lam ||x||^2 / 2.
    num_nodes, samples_per_node, dim : int
        N, m_i and K (defaults: -, 100, 10).
    noise : float
        Scale of e (Gaussian sd, or Laplace scale for LAD) (default: 0.1).
    c1 : float
        Row-norm clip; rows are N(0, I_K / K), so ||a|| is about 1 (default: 1.5).
    residual_bound : float
        R of the squared loss's gradient clip, G = c1 R (default: 2.0).
    lam, lam1, lam2 : float
        Penalty weights (defaults: 0.1, 1.0, 0.5).
    heterogeneity : float
        Node i observes x0 + h u_i with u_i ~ N(0, I_K), so local optima differ (non-iid nodes); 0 is
        Gauthier et al.'s (2023) setting, every node observing the same x0 (default: 0.0).
    rng : np.random.Generator
        Source of x0, A and e.
    loss, penalty : optional
        The objective's loss and penalty (weight ``lam``) when they are not the problem's own (a scenario's
        ``model`` section, :func:`fdp_flower.algorithms.p2p.plan.build_problem`); the data are the same.
    """
    if kind not in SYNTHETIC_PROBLEMS:
        raise ValueError(f"unknown synthetic problem {kind!r}; choose one of {', '.join(SYNTHETIC_PROBLEMS)}")
    x0 = rng.standard_normal(dim)
    if kind == "elastic_net":  # a sparse truth, as in Boyd et al.'s lasso examples
        x0[rng.permutation(dim)[: dim // 2]] = 0.0
    feats, resps, n_clip = [], [], 0
    for _ in range(num_nodes):
        a = rng.standard_normal((samples_per_node, dim)) / np.sqrt(dim)
        a, c = clip_rows(a, c1)
        n_clip += c
        e = rng.laplace(0.0, noise, samples_per_node) if kind == "lad" else noise * rng.standard_normal(samples_per_node)
        x_i = x0 + heterogeneity * rng.standard_normal(dim) if heterogeneity > 0 else x0
        feats.append(a)
        resps.append(a @ x_i + e)
    if loss is not None or penalty is not None:
        if loss is None or penalty is None:
            raise ValueError("give both loss and penalty, or neither")
        lam_ = lam
    elif kind == "lad":
        loss, penalty, lam_ = AbsoluteLoss(), Penalty("none"), 0.0
    elif kind == "ridge":
        loss, penalty, lam_ = SquaredLoss(residual_bound=residual_bound), Penalty("l2"), lam
    else:
        loss, penalty, lam_ = SquaredLoss(residual_bound=residual_bound), Penalty("elastic_net", lam1=lam1, lam2=lam2), lam
    if isinstance(loss, LogisticLoss):
        raise ValueError("the logistic loss needs labels in {-1, +1}; synthetic regression responses are real")
    x_star, solver = (reference_solution(feats, resps, loss, penalty, lam_) if with_reference else (None, ""))
    return NetworkProblem(name=kind, features=tuple(feats), responses=tuple(resps), loss=loss, penalty=penalty,
                          lam=lam_, c1=c1, x_star=x_star, truth=x0, n_clipped=n_clip, reference_solver=solver)


# ---------------------------------------------------------------- caller's arrays
def arrays_problem(paths, digests=None, *, loss, penalty: Penalty, lam: float, c1: float, intercept: bool = False,
                   intercept_share: float = 0.5, with_reference: bool = True) -> NetworkProblem:
    """The problem of a ``data.kind: arrays`` section (:class:`fdp_flower.algorithms.p2p.config.P2PArraysData`):
    node i's rows from ``paths[i]`` (checked against ``digests[i]``), with the intercept column of
    :func:`fdp_flower.core.clipping.intercept_design` when ``intercept`` is set, clipped to ||a|| <= c1."""
    from fdp_flower.core.clipping import intercept_design
    from fdp_flower.data.tabular import read_arrays_file

    feats, resps, n_clip = [], [], 0
    for i, path in enumerate(paths):
        a, y = read_arrays_file(path, None if digests is None else digests[i])
        if feats and a.shape[1] != feats[0].shape[1] - int(intercept):
            raise ValueError(f"{path}: {a.shape[1]} features, the first node's file has "
                             f"{feats[0].shape[1] - int(intercept)}")
        if isinstance(loss, LogisticLoss) and not np.all(np.isin(y, (-1.0, 1.0))):
            raise ValueError(f"{path}: the logistic loss needs labels in {{-1, +1}}")
        a, c = intercept_design(a, c1, intercept_share) if intercept else clip_rows(a, c1)
        n_clip += c
        feats.append(a)
        resps.append(y)
    x_star, solver = None, ""
    if with_reference:
        try:
            x_star, solver = reference_solution(feats, resps, loss, penalty, lam)
        except ValueError:  # no exact solver for this loss and penalty (e.g. logistic + l1): no normalized error
            pass
    return NetworkProblem(name="arrays", features=tuple(feats), responses=tuple(resps), loss=loss, penalty=penalty,
                          lam=lam, c1=c1, x_star=x_star, n_clipped=n_clip, reference_solver=solver)


# ---------------------------------------------------------------- classification (Ding et al. 2019)
def _split_nodes(x, y, num_nodes, samples_per_node, test_samples, rng):
    n = len(y)
    need = num_nodes * samples_per_node + test_samples
    if need > n:
        raise ValueError(f"{num_nodes} nodes x {samples_per_node} samples + {test_samples} test rows "
                         f"need {need} rows; the data has {n}")
    perm = rng.permutation(n)
    tr = perm[: num_nodes * samples_per_node].reshape(num_nodes, samples_per_node)
    te = perm[num_nodes * samples_per_node: need]
    return tuple(x[r] for r in tr), tuple(y[r] for r in tr), x[te], y[te]


def logistic_problem(x, y, *, name: str, num_nodes: int, samples_per_node: int, test_samples: int,
                     reg: float = 1e-3, rng: np.random.Generator, c1: float, n_clipped: int = 0,
                     with_reference: bool = True, loss=None, penalty: Penalty | None = None,
                     lam: float | None = None) -> NetworkProblem:
    """Labelled rows split over the nodes; default objective: logistic loss + R(x) = Lambda ||x||^2 (Ding et al.
    2019, Sec. V), i.e. P = elastic_net(lam1=0, lam2=1) with lam = Lambda = ``reg`` (``loss``, ``penalty``,
    ``lam``: another objective, the scenario's ``model``)."""
    feats, resps, xte, yte = _split_nodes(x, y, num_nodes, samples_per_node, test_samples, rng)
    loss = LogisticLoss() if loss is None else loss
    penalty = Penalty("elastic_net", lam1=0.0, lam2=1.0) if penalty is None else penalty
    lam = reg if lam is None else lam
    x_star, solver = None, ""
    if with_reference:
        try:
            x_star, solver = reference_solution(feats, resps, loss, penalty, lam)
        except ValueError:  # no exact solver for this loss and penalty (e.g. logistic + l1): no normalized error
            pass
    return NetworkProblem(name=name, features=feats, responses=resps, loss=loss, penalty=penalty, lam=lam, c1=c1,
                          x_star=x_star, test_features=xte, test_responses=yte, n_clipped=n_clipped,
                          reference_solver=solver)


def adult_problem(*, num_nodes: int = 5, samples_per_node: int = 8000, test_samples: int = 1000,
                  reg: float = 1e-3, c1: float = 1.0, rng: np.random.Generator, path: str | None = None,
                  with_reference: bool = True, loss=None, penalty: Penalty | None = None,
                  lam: float | None = None) -> NetworkProblem:
    """UCI Adult as in Ding et al. (2019), Sec. V: rows with a missing value removed, train and test files pooled,
    a9a-like one-hot encoding (fdp_flower.data.tabular.encode_adult) plus an intercept, every row scaled
    by the public constant 1/sqrt(15) (at most 15 ones per row) and clipped to ||a|| <= c1; labels
    +1 for income > 50K.  N x m rows for training, ``test_samples`` of the rest for testing."""
    from fdp_flower.data.tabular import encode_adult, load_adult_raw

    train, test = load_adult_raw(path)
    frames = []
    for frame in (train, test):
        complete_rows = ~(frame.astype(str) == "?").any(axis=1)
        frames.append(frame[complete_rows])
    x, y = [], []
    for frame in frames:
        enc = encode_adult(frame)
        x.append(np.hstack([enc, np.ones((len(enc), 1))]) / np.sqrt(15.0))
        y.append(np.where(frame["income"].to_numpy() == ">50K", 1.0, -1.0))
    x, n_clip = clip_rows(np.vstack(x), c1)
    return logistic_problem(x, np.concatenate(y), name="adult", num_nodes=num_nodes,
                            samples_per_node=samples_per_node, test_samples=test_samples, reg=reg, rng=rng,
                            c1=c1, n_clipped=n_clip, with_reference=with_reference, loss=loss, penalty=penalty,
                            lam=lam)


def breast_cancer_problem(*, num_nodes: int = 5, samples_per_node: int = 90, test_samples: int = 119,
                          reg: float = 1e-3, c1: float = 1.0, rng: np.random.Generator,
                          with_reference: bool = True, loss=None, penalty: Penalty | None = None,
                          lam: float | None = None) -> NetworkProblem:
    """scikit-learn's breast-cancer data (569 rows, 30 features): standardized (pooled statistics, a
    non-private convenience), an intercept appended, every row scaled by 1/sqrt(31) and clipped to c1."""
    from fdp_flower.data.tabular import load_breast_cancer_binary

    x, y = load_breast_cancer_binary(standardize=True, intercept=True)
    x, n_clip = clip_rows(x / np.sqrt(x.shape[1]), c1)
    return logistic_problem(x, y, name="breast_cancer", num_nodes=num_nodes, samples_per_node=samples_per_node,
                            test_samples=test_samples, reg=reg, rng=rng, c1=c1, n_clipped=n_clip,
                            with_reference=with_reference, loss=loss, penalty=penalty, lam=lam)
