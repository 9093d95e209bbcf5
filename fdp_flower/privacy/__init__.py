"""Privacy accounting: a per-client ledger of every noisy release (spec section 6)."""
from fdp_flower.privacy.ledger import GaussianRelease, PrivacyLedger, PrivacySummary

__all__ = ["GaussianRelease", "PrivacyLedger", "PrivacySummary"]
