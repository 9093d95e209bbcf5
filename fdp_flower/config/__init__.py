"""Scenario schemas: the shared sections and file handling (:mod:`.base`, :mod:`.sections`,
:mod:`.functional`).  Each algorithm family's own schema lives with its math
(``fdp_flower.algorithms.<family>.config``); :mod:`fdp_flower.algorithms.registry` picks it."""
