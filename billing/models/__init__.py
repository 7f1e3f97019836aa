"""Billing models: usage and its rollups, budgets and billing policies, monthly reports."""

from billing.models.budgets import Budget, TeamBillingPolicy
from billing.models.energy import CarbonIntensityHour, EnergySettings
from billing.models.health import GpuFault, GpuFaultCredit, GpuHealth, GpuHealthEvent
from billing.models.ledger import LedgerHour, LedgerRate, LedgerState
from billing.models.reports import MonthlyReport
from billing.models.usage import (
    IdleWatchState,
    IngestState,
    ScrapeState,
    UsageDay,
    UsageDayState,
    UsageHour,
)

__all__ = [
    "Budget",
    "CarbonIntensityHour",
    "EnergySettings",
    "GpuFault",
    "GpuFaultCredit",
    "GpuHealth",
    "GpuHealthEvent",
    "IngestState",
    "LedgerHour",
    "LedgerRate",
    "LedgerState",
    "MonthlyReport",
    "ScrapeState",
    "IdleWatchState",
    "TeamBillingPolicy",
    "UsageDay",
    "UsageDayState",
    "UsageHour",
]
