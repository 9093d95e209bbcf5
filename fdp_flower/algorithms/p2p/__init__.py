"""Peer-to-peer (networked) federated learning: zCDP-NFL and baselines (paper 002) and PR-ADMM
(paper 004) over a graph (spec sections 3 and 4).  Pure numpy; no Flower import."""
