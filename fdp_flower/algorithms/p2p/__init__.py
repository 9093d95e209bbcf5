"""Peer-to-peer (networked) federated learning: zCDP-NFL and baselines (Gauthier et al. 2023) and PR-ADMM
(Ding et al. 2019) over a graph (docs/algorithms.md, sections 3 and 4).  Pure numpy; no Flower import."""
