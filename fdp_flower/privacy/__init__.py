"""Privacy accounting: a per-client ledger of every noisy release (docs/algorithms.md, section 6).

- :mod:`.ledger`: :class:`GaussianRelease` events, :class:`PrivacyLedger` and its
  per-client totals (zCDP, RDP and PLD through ``dp_accounting``);
- :mod:`.calibration`: schedule shapes and total-budget calibration;
- :mod:`.closed_forms`: each paper's printed privacy figure, to show beside the ledger;
- :mod:`.guard`: :class:`BudgetGuard`, which refuses a release that would exceed a total budget.
"""
from fdp_flower.privacy.calibration import (
                                            SCHEDULE_SHAPES,
                                            calibrate_noise_multiplier,
                                            calibrate_schedule,
                                            composed_gaussian_event,
                                            schedule_multipliers,
)
from fdp_flower.privacy.guard import BudgetExhausted, BudgetGuard, GuardReport
from fdp_flower.privacy.ledger import (
                                            NEIGHBOURING_FACTORS,
                                            GaussianRelease,
                                            PrivacyLedger,
                                            PrivacySummary,
                                            pld_epsilon,
                                            rdp_epsilon,
                                            summarize,
                                            zcdp_epsilon,
)

__all__ = [
    "BudgetExhausted", "BudgetGuard", "GaussianRelease", "GuardReport", "NEIGHBOURING_FACTORS", "PrivacyLedger",
    "PrivacySummary", "SCHEDULE_SHAPES", "calibrate_noise_multiplier", "calibrate_schedule",
    "composed_gaussian_event", "pld_epsilon", "rdp_epsilon", "schedule_multipliers", "summarize", "zcdp_epsilon",
]
