"""planning's models, one module per concern; import them from here."""

from planning.models.auto_approval import QuotaAutoApproval
from planning.models.whatif import WhatIfRun

__all__ = ["QuotaAutoApproval", "WhatIfRun"]
