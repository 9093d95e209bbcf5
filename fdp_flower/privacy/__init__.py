"""Privacy accounting: a per-client ledger of every noisy release (docs/algorithms.md, section 6).

- :mod:`.ledger`: :class:`GaussianRelease` events, :class:`PrivacyLedger` and its
  per-client totals (zCDP, RDP and PLD through ``dp_accounting``);
- :mod:`.calibration`: schedule shapes and total-budget calibration;
- :mod:`.closed_forms`: each paper's printed privacy figure, to show beside the ledger;
- :mod:`.guard`: :class:`BudgetGuard`, which refuses a release that would exceed a total budget;
- :mod:`.accountant`: :class:`PrivacyAccountant`, one data set's budget across fits (composed by PLD).
"""
from __future__ import annotations

import importlib

# name -> submodule, imported on first use: a client that needs only GaussianRelease does not
# import dp_accounting (and through it scipy)
_EXPORTS = {
    **dict.fromkeys(["SCHEDULE_SHAPES", "calibrate_noise_multiplier", "calibrate_schedule", "composed_gaussian_event",
                     "schedule_multipliers"], "calibration"),
    **dict.fromkeys(["BudgetExhausted", "BudgetGuard", "GuardReport"], "guard"),
    **dict.fromkeys(["AccountedFit", "BudgetExceeded", "PrivacyAccountant"], "accountant"),
    **dict.fromkeys(["NEIGHBOURING_FACTORS", "GaussianRelease", "PrivacyLedger", "PrivacySummary", "pld_epsilon",
                     "rdp_epsilon", "summarize", "zcdp_epsilon"], "ledger"),
}


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_EXPORTS)
