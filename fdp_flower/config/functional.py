"""Schemas of the functional-data choices of a scenario: where curves come from, which basis.

Each kind here has its loading/building in exactly one place: data sources in
:mod:`fdp_flower.functional.sources`, bases in :mod:`fdp_flower.functional.bases`.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from fdp_flower.config.base import _Frozen, tagged_union


# ---------------------------------------------------------------- data sources
class PaperSimulation(_Frozen):
    """The functional design of Zhou & Xiang (2022), Section 5 (docs/algorithms.md, section 1)."""

    kind: Literal["paper_simulation"] = Field("paper_simulation", description="variant tag")
    n_samples: int = Field(100_000, ge=2, le=10_000_000, description="total samples n over all clients")
    grid_points: int = Field(100, ge=5, le=10_000, description="equispaced grid points on [0, 1]")
    design: Literal["paper", "brownian", "heavy_tailed"] = Field(
        "paper", description="simulated process (fdp_flower.functional.design.DESIGNS): Zhou & Xiang (2022)'s design, "
                             "Brownian-motion curves with Gaussian errors, or Laplace-score curves with "
                             "Cauchy errors")


class NodeFiles(_Frozen):
    """Node-local files (deployment): each node reads its own file (see :mod:`fdp_flower.functional.node_files`).

    In a deployment each SuperNode names its file in its node config (``data-path=...``);
    the server never sees the data and learns each m_i from the replies.
    """

    kind: Literal["node_files"] = Field("node_files", description="variant tag")
    grid_start: float = Field(0.0, ge=-1e9, le=1e9, description="first point of the common equispaced grid")
    grid_stop: float = Field(1.0, ge=-1e9, le=1e9, description="last point of the common equispaced grid")
    grid_points: int = Field(100, ge=3, le=10_000, description="number of grid points")
    grid: list[float] | None = Field(
        None, min_length=3, max_length=10_000, description="the grid's points, for a non-equispaced grid (strictly "
                                                          "increasing); replaces grid_start, grid_stop, grid_points")
    paths: list[str] | None = Field(
        None, max_length=10_000, description="per-client files for simulation engines (client i reads paths[i]); a node's "
                          "data-path node config takes precedence")
    response_offset: float = Field(
        0.0, ge=-1e12, le=1e12, description="public constant subtracted from every response on the client "
                         "(model.intercept fits the rest privately)")
    response_scale: float = Field(
        1.0, gt=0, le=1e12, description="public positive constant the client divides every response by after "
                                        "subtracting response_offset (the fit is in these units; the released "
                                        "model is mapped back)")

    @model_validator(mode="after")
    def _grid(self):
        if not self.grid_stop > self.grid_start:
            raise ValueError("grid_stop must exceed grid_start")
        if self.grid is not None and not (all(math.isfinite(t) for t in self.grid)
                                          and all(b > a for a, b in zip(self.grid, self.grid[1:]))):
            raise ValueError("data.grid must be finite and strictly increasing")
        return self


class ClientArrays(_Frozen):
    """Curves a caller holds in memory (:func:`fdp_flower.fit`), one ``.npz`` per client.

    Each file has the node-file layout (arrays ``grid`` (G,), ``curves`` (m_i, G) and
    ``response`` (m_i,); :mod:`fdp_flower.functional.node_files`); client i reads ``paths[i]``.
    The grid is the files' own, so it may be non-equispaced; all files must share it.  The
    arrays never enter the scenario: it names the files and their SHA-256 digests, and a file
    that changed since is refused.
    """

    kind: Literal["client_arrays"] = Field("client_arrays", description="variant tag")
    paths: list[str] = Field(min_length=1, max_length=10_000,
                             description="one .npz per client (grid, curves, response); client i reads paths[i]")
    digests: list[str] | None = Field(
        None, max_length=10_000, description="SHA-256 (hex) of each file; null: not checked")
    response_offset: float = Field(
        0.0, ge=-1e12, le=1e12, description="public constant subtracted from every response on the client")
    response_scale: float = Field(
        1.0, gt=0, le=1e12, description="public positive constant the client divides every response by after "
                                        "subtracting response_offset (the fit is in these units; the released "
                                        "model is mapped back)")

    @model_validator(mode="after")
    def _digests(self):
        if self.digests is not None and len(self.digests) != len(self.paths):
            raise ValueError(f"digests has {len(self.digests)} entries for {len(self.paths)} paths")
        return self


class InMemoryCurves(_Frozen):
    """Curves a caller holds in memory (:func:`fdp_flower.fit`), passed to the in-process engine as arrays:
    nothing is written to disk.  The scenario names only their SHA-256 digest; the arrays exist in the
    process that fit them, so such a scenario runs in process only (Flower runs read node files)."""

    kind: Literal["in_memory"] = Field("in_memory", description="variant tag")
    digest: str = Field(min_length=1, max_length=100, description="SHA-256 of the clients' grids, curves and responses")
    response_offset: float = Field(
        0.0, ge=-1e12, le=1e12, description="public constant subtracted from every response on the client")
    response_scale: float = Field(
        1.0, gt=0, le=1e12, description="public positive constant the client divides every response by after "
                                        "subtracting response_offset (the fit is in these units; the released "
                                        "model is mapped back)")


DataSource = tagged_union(PaperSimulation, NodeFiles, ClientArrays, InMemoryCurves, default="paper_simulation")


# ---------------------------------------------------------------- bases
class PooledBasis(_Frozen):
    """FPCA on all curves (non-private; simulation studies only)."""

    kind: Literal["pooled"] = Field("pooled", description="variant tag")
    n_components: int | None = Field(10, ge=1, le=200, description="K; null to choose by explained_variance")
    explained_variance: float | None = Field(None, gt=0, le=1, description="cumulative ratio that fixes K")

    @model_validator(mode="after")
    def _one_of(self):
        if (self.n_components is None) == (self.explained_variance is None):
            raise ValueError("give exactly one of n_components and explained_variance")
        return self


class FixedBasis(_Frozen):
    """A data-independent basis (costs no privacy)."""

    kind: Literal["fixed"] = Field("fixed", description="variant tag")
    family: Literal["cosine", "fourier", "bspline"] = Field("cosine", description="basis family")
    n_components: int = Field(10, ge=1, le=200, description="K")


class FederatedDPBasis(_Frozen):
    """FPCA from noisy covariance summaries of the clients (docs/algorithms.md, section 2;
    :mod:`fdp_flower.functional.federated_fpca`)."""

    kind: Literal["federated_dp"] = Field("federated_dp", description="variant tag")
    n_components: int = Field(10, ge=1, le=200, description="K")
    pre_basis: Literal["bspline", "cosine", "fourier"] = Field("bspline", description="fixed pre-basis family")
    pre_basis_size: int = Field(30, ge=4, le=400, description="B: size of the pre-basis")
    clip_cb: float = Field(3.0, gt=0, description="c_b: clip of each curve's pre-basis coefficient vector")
    private: bool = Field(True, description="false: exact summaries (no noise, no DP guarantee)")
    eps: float = Field(1.0, gt=0, description="eps of the one covariance release of each client")
    delta: float = Field(1.0e-6, gt=0, lt=1, description="delta of that release")
    whiten: bool = Field(False, description="scale phi_k by 1/sqrt(lambda_k): unit-variance scores (same span)")

    @model_validator(mode="after")
    def _sizes(self):
        if self.n_components > self.pre_basis_size:
            raise ValueError("n_components cannot exceed pre_basis_size")
        if not math.isfinite(self.eps):
            raise ValueError("eps must be finite (use private: false for no noise)")
        return self


class ProvidedBasis(_Frozen):
    """A basis supplied by the user: an .npz with grid, components (K, G), mean and weights."""

    kind: Literal["provided"] = Field("provided", description="variant tag")
    path: str = Field(min_length=1, description="path of the .npz (absolute or relative to the working directory)")


Basis = tagged_union(PooledBasis, FixedBasis, FederatedDPBasis, ProvidedBasis, default="pooled")


