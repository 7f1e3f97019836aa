"""A report line as a typed record: one GPU model's use by a team (or use no team is known
for), or a team's borrowing charge or lending credit, with the figures the report's pages and
exports show. A report itself stays plain JSON (frozen into MonthlyReport when its month closes,
served by the API as it is); its lines are made and read through this record."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ReportLine:
    """Figures as the report writes them: GPU-hours to two places and money to the cent, as
    strings; `util_mean` in percent. A ledger line has a cost only (its hours are in its label);
    `flags` (gap, stuck_zero, unknown_model) are on measured lines."""

    gpu_model: str
    gpu_hours_allocated: str = ""
    gpu_hours_used: str = ""
    gpu_hours_idle: str = ""
    util_mean: float | str = ""
    cost: str = "0.00"
    flags: dict | None = None

    @classmethod
    def from_dict(cls, data: dict) -> ReportLine:
        """The line a report holds (its other keys, such as a total's, are left aside)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def as_dict(self) -> dict:
        """As the report holds it (no flags key on a line that has none)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.flags is None:
            del out["flags"]
        return out
