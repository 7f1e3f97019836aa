"""Server-side chart geometry for the billing pages (rendered as inline SVG by templates)."""

from decimal import Decimal


def hbars(
    items: list[tuple[str, float, float]], *, width: int = 560, row: int = 26, digits: int = 1
) -> dict:
    """Horizontal stacked bars: (label, used, idle) → rectangles scaled to the largest total."""
    label_w = 150
    plot_w = width - label_w - 90
    largest = max((used + idle for _, used, idle in items), default=0) or 1
    bars = []
    for i, (label, used, idle) in enumerate(items):
        used_w = plot_w * used / largest
        idle_w = plot_w * idle / largest
        bars.append(
            {
                "label": label,
                "y": i * row + 4,
                "text_y": i * row + 18,
                "used_w": round(used_w, 1),
                "idle_x": round(label_w + used_w, 1),
                "idle_w": round(idle_w, 1),
                "value_x": round(label_w + used_w + idle_w + 6, 1),
                "used": f"{used:.{digits}f}",
                "idle": f"{idle:.{digits}f}",
                "total": f"{used + idle:.{digits}f}",
            }
        )
    return {
        "width": width,
        "height": max(row, len(items) * row + 8),
        "label_w": label_w,
        "bars": bars,
    }


def report_charts(report: dict) -> dict:
    """GPU-hours used and idle per team, and cost per team, as chart geometry."""
    teams = []
    costs = []
    for team in report.get("teams", []):
        used = float(Decimal(team["gpu_hours_used"]))
        idle = float(Decimal(team["gpu_hours_idle"]))
        teams.append((team["team_name"], used, idle))
        costs.append((team["team_name"], float(Decimal(team["cost"])), 0.0))
    for pool in report.get("idle_capacity", []) or []:
        teams.append((f"idle: {pool['pool']}", 0.0, float(Decimal(pool["gpu_hours_idle"]))))
    return {"hours": hbars(teams), "cost": hbars(costs, digits=2)}
