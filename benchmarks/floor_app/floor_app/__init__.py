"""Plain-Flower floor app of the scaling benchmark (no fdp_flower import)."""
