"""Report export formats, pure: CSV, Excel, FinOps FOCUS CSV, their content types and file names."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

from billing.lines import ReportLine

# Energy columns: GPU energy as DCGM measured it, then the estimates (× the site's PUE, × the
# grid's carbon intensity), and the GPU-hours held without an energy reading ("not measured":
# their energy is in no column, an empty cell is never 0).
ENERGY_COLUMNS = [
    "gpu_energy_kwh", "facility_energy_kwh_estimate", "co2e_kg_estimate",
    "gpu_hours_energy_not_measured",
]  # fmt: skip
# The work preempted jobs lost (GPU-hours since their last checkpoint): on a row of its own per
# team (its other figures empty, its cost 0.00: the hours are in the team's lines already).
LOSS_COLUMN = "gpu_hours_lost_to_preemption"
CSV_COLUMNS = [
    "month", "team", "department", "cost_centre", "gpu_model", "gpu_hours_allocated",
    "gpu_hours_used", "gpu_hours_idle", "util_mean", "cost", "currency", *ENERGY_COLUMNS,
    LOSS_COLUMN,
]  # fmt: skip


def energy_cells(energy: dict | None) -> list:
    """The ENERGY_COLUMNS of a line or total: empty where not measured or not estimated."""
    energy = energy or {}
    return [
        energy.get("gpu_energy_kwh") or "",
        energy.get("facility_energy_kwh") or "",
        energy.get("co2e_kg") or "",
        energy.get("gpu_hours_not_measured") or "",
    ]


def _row(
    report: dict, who: tuple[str, str, str], line: ReportLine, energy=None, lost: str = ""
) -> list:
    """One line in CSV_COLUMNS order: who is (team, department, cost centre)."""
    return [
        report["month"], *who, line.gpu_model, line.gpu_hours_allocated, line.gpu_hours_used,
        line.gpu_hours_idle, line.util_mean, line.cost, report["currency"],
        *energy_cells(energy), lost,
    ]  # fmt: skip


def _loss_rows(report: dict) -> list[list]:
    """Per team with preempted jobs, the GPU-hours they lost (LOSS_COLUMN)."""
    rows = []
    for team in report["teams"]:
        lost = team.get("preemption")
        if lost:
            what = f"work lost to preemption ({lost['preemptions']} preemptions)"
            rows.append(_row(report, (team["team"], team["department"], team["cost_centre"]),
                             ReportLine(gpu_model=what), lost=lost["gpu_hours_lost"]))  # fmt: skip
    return rows


def _lines(entries: list[dict]) -> list[ReportLine]:
    return [ReportLine.from_dict(entry) for entry in entries]


def _with_energy(entries: list[dict]) -> list[tuple[ReportLine, dict | None]]:
    return [(ReportLine.from_dict(entry), entry.get("energy")) for entry in entries]


def _ledger_lines(team: dict) -> list[ReportLine]:
    """A team's borrowing charge and lending credit as report lines (no GPU-hours columns: the
    hours are in the label, the lines' hours stay those the team's jobs held)."""
    ledger = team.get("ledger") or {}
    out = []
    if Decimal(ledger.get("charge") or 0):
        out.append(ReportLine(gpu_model=f"borrowed from the cohort ({ledger['gpu_hours_borrowed']} "
                              "GPU-hours)", cost=ledger["charge"]))  # fmt: skip
    if Decimal(ledger.get("credit") or 0):
        out.append(ReportLine(gpu_model=f"lent to the cohort ({ledger['gpu_hours_lent']} "
                              "GPU-hours)", cost=str(-Decimal(ledger["credit"]))))  # fmt: skip
    return out


def _reservation_lines(team: dict) -> list[ReportLine]:
    """A team's advance reservations: one line each, the GPU-hours held in the month (the
    jobs that ran in them have their own lines; the held capacity is priced by the policy)."""
    return [
        ReportLine(
            gpu_model=f"reservation #{line['reservation_id']}: {line['gpus']} GPUs of "
            f"{line['pool']} held {line['start']} to {line['end']} ({line['basis']})",
            gpu_hours_allocated=line["gpu_hours_held"],
            cost=line["cost"],
        )
        for line in (team.get("reservations") or {}).get("lines", [])
    ]


def _fault_credit_lines(team: dict) -> list[ReportLine]:
    """A team's credits for GPU faults, one line each naming the fault and the job (negative
    cost; the hours are in the label, as on ledger lines)."""
    return [
        ReportLine(
            gpu_model=f"credit: GPU fault #{c['fault_id']} (node {c['cluster_node']} GPU "
            f"{c['gpu_index']}), job #{c['job_id']}, {c['gpu_hours']} GPU-hours lost"
            + (
                f" since its checkpoint at {c['checkpoint_at'][:16]}"
                if c.get("checkpoint_at")
                else ""
            ),
            cost=str(-Decimal(c["amount"])),
        )
        for c in (team.get("gpu_fault_credits") or {}).get("lines", [])
    ]


def _extra_lines(team: dict) -> list[ReportLine]:
    """The lines after a team's GPU lines: ledger charge and credit, fault credits, then its
    advance reservations."""
    return _ledger_lines(team) + _fault_credit_lines(team) + _reservation_lines(team)


def report_rows(report: dict) -> list[list]:
    """Flat lines: per team, one per GPU model and then its borrowing charge and lending credit
    (the ledger, where finance set a rate); then unattributed use (finance)."""
    rows = [
        _row(report, (team["team"], team["department"], team["cost_centre"]), line, energy)
        for team in report["teams"]
        for line, energy in _with_energy(team["lines"])
        + [(extra, None) for extra in _extra_lines(team)]
    ]
    rows += _loss_rows(report)
    rows += [
        _row(report, ("(unattributed)", "", ""), line, energy)
        for line, energy in _with_energy(report.get("unattributed", []))
    ]
    return rows


def _total_row(report: dict) -> list:
    """The totals line that closes the CSV and the workbook's first sheet: its cost is the sum
    of the lines above it (ledger charges and credits included)."""
    net = sum((Decimal(line.cost) for team in report["teams"]
               for line in _extra_lines(team)), Decimal(0))  # fmt: skip
    cost = str(Decimal(report["totals"]["cost"]) + net)
    total = ReportLine.from_dict(
        {**report["totals"], "cost": cost, "gpu_model": "", "util_mean": ""}
    )
    lost = sum(
        (
            Decimal(t["preemption"]["gpu_hours_lost"])
            for t in report["teams"]
            if t.get("preemption")
        ),
        Decimal(0),
    )
    return _row(report, ("TOTAL", "", ""), total, report["totals"].get("energy"),
                str(lost) if lost else "")  # fmt: skip


def report_csv(report: dict) -> str:
    """The report as CSV; the last line carries the totals."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(report_rows(report))
    writer.writerow(_total_row(report))
    return buf.getvalue()


# Excel number formats by column: GPU-hours keep the exact four decimals, money two, the mean
# utilisation one; a spreadsheet shows them so and sums them as numbers.
XLSX_FORMATS = {
    "gpu_hours_allocated": "#,##0.0000", "gpu_hours_used": "#,##0.0000",
    "gpu_hours_idle": "#,##0.0000", "util_mean": "0.0", "cost": "#,##0.00",
    "gpu_energy_kwh": "#,##0.000", "facility_energy_kwh_estimate": "#,##0.000",
    "co2e_kg_estimate": "#,##0.000", "gpu_hours_energy_not_measured": "#,##0.0000",
    LOSS_COLUMN: "#,##0.0000",
}  # fmt: skip


def _sheet(ws, header: list[str], rows: list[list]) -> None:
    """Header (bold, frozen) and rows, each numeric column with its number format and every
    column wide enough for its longest value."""
    from openpyxl.styles import Font

    ws.append(header)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    ws.freeze_panes = "A2"
    for row in rows:
        ws.append([_num(v) for v in row])
    for column in ws.iter_cols(min_row=1):
        name = column[0].value
        for cell in column[1:]:
            if name in XLSX_FORMATS and isinstance(cell.value, Decimal | int | float):
                cell.number_format = XLSX_FORMATS[name]
        widest = max(len(str(cell.value)) for cell in column if cell.value is not None)
        ws.column_dimensions[column[0].column_letter].width = min(60, max(10, widest + 2))


def report_xlsx(report: dict) -> bytes:
    """The report as an Excel workbook: lines, then idle capacity (finance); numbers as numbers
    with their formats."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = f"Report {report['month']}"
    _sheet(ws, CSV_COLUMNS, [*report_rows(report), _total_row(report)])
    if report.get("idle_capacity") is not None:
        idle = wb.create_sheet("Idle capacity")
        _sheet(idle, ["cluster", "pool", "gpu_model", "gpu_hours_idle", "cost"], [
            [e["cluster"], e["pool"], e["gpu_model"], e["gpu_hours_idle"], e["cost"]]
            for e in report["idle_capacity"]
        ])  # fmt: skip
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _num(value):
    if isinstance(value, str):
        try:
            return Decimal(value)
        except ArithmeticError:
            return value
    return value


# FOCUS custom columns start with "x_": the energy columns in ENERGY_COLUMNS' order, marked
# as estimates where they are (empty on ledger rows and where not measured).
ENERGY_FOCUS_COLUMNS = [
    "x_GpuEnergyKWh", "x_FacilityEnergyKWhEstimate", "x_CO2eKgEstimate",
    "x_EnergyNotMeasuredGpuHours",
]  # fmt: skip

# FinOps FOCUS column names (FOCUS 1.x), one charge row per team × GPU model line.
FOCUS_COLUMNS = [
    "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodStart",
    "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory",
    "ChargeClass", "ChargeDescription", "ChargeFrequency", "BilledCost", "EffectiveCost",
    "ListCost", "ContractedCost", "ConsumedQuantity", "ConsumedUnit", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "InvoiceIssuerName", "ServiceCategory",
    "ServiceName", "ResourceType", "SkuId", "SubAccountId", "SubAccountName", "Tags",
    *ENERGY_FOCUS_COLUMNS,
]  # fmt: skip


def _focus_ledger_rows(report: dict, team: dict) -> list[list]:
    """A team's borrowing charge (Usage) and lending credit (Credit, negative) in FOCUS."""
    ledger = team.get("ledger") or {}
    rows = []
    for category, amount, hours, what in (
        ("Usage", ledger.get("charge"), ledger.get("gpu_hours_borrowed"),
         "GPU-hours borrowed from the department's cohort"),
        ("Credit", ledger.get("credit"), ledger.get("gpu_hours_lent"),
         "GPU-hours lent to the department's cohort"),
    ):  # fmt: skip
        if not amount or not Decimal(amount):
            continue
        cost = str(Decimal(amount) if category == "Usage" else -Decimal(amount))
        rows.append([
            team["cost_centre"] or team["team"], team["team_name"], report["currency"],
            report["period_start"], report["period_end"], report["period_start"],
            report["period_end"], category, "", what, "Usage-Based", cost, cost, cost, cost,
            hours, "GPU-Hours", hours, "GPU-Hours", "Quartermaster", "Quartermaster",
            "Quartermaster", "AI and Machine Learning", "GPU quota borrowing", "GPU quota",
            "cohort-ledger", team["team"], team["team_name"],
            json.dumps({"department": team["department"], "ledger": category.lower()}),
            *energy_cells(None),
        ])  # fmt: skip
    return rows


def _focus_reservation_rows(report: dict, team: dict) -> list[list]:
    """A team's advance reservations in FOCUS: a Usage charge each, for the GPU-hours held."""
    rows = []
    for line in (team.get("reservations") or {}).get("lines", []):
        cost, hours = line["cost"], line["gpu_hours_held"]
        rows.append([
            team["cost_centre"] or team["team"], team["team_name"], report["currency"],
            report["period_start"], report["period_end"], line["start"], line["end"],
            "Usage", "", f"{line['gpus']} GPUs of {line['pool']} reserved (held capacity)",
            "Usage-Based", cost, cost, cost, cost, hours, "GPU-Hours", hours, "GPU-Hours",
            "Quartermaster", "Quartermaster", "Quartermaster", "AI and Machine Learning",
            "GPU reservation", "GPU", f"reservation-{line['reservation_id']}", team["team"],
            team["team_name"],
            json.dumps({"department": team["department"], "basis": line["basis"],
                        "reservation": line["reservation_id"]}),
            *energy_cells(None),
        ])  # fmt: skip
    return rows


def _focus_fault_rows(report: dict, team: dict) -> list[list]:
    """A team's GPU fault credits in FOCUS: one Credit row (negative) per credit, tagged with
    the fault and the job so finance can trace it."""
    rows = []
    for c in (team.get("gpu_fault_credits") or {}).get("lines", []):
        cost, hours = str(-Decimal(c["amount"])), c["gpu_hours"]
        rows.append([
            team["cost_centre"] or team["team"], team["team_name"], report["currency"],
            report["period_start"], report["period_end"], report["period_start"],
            report["period_end"], "Credit", "",
            f"GPU-hours lost to GPU fault #{c['fault_id']} (job #{c['job_id']})", "Usage-Based",
            cost, cost, cost, cost, hours, "GPU-Hours", hours, "GPU-Hours", "Quartermaster",
            "Quartermaster", "Quartermaster", "AI and Machine Learning", "GPU fault credit",
            "GPU", f"gpu-fault-{c['fault_id']}", team["team"], team["team_name"],
            json.dumps({"department": team["department"], "gpu_fault": c["fault_id"],
                        "job": c["job_id"], "credit": c["credit_id"],
                        "node": c["cluster_node"], "gpu": c["gpu_index"]}),
            *energy_cells(None),
        ])  # fmt: skip
    return rows


def report_focus_csv(report: dict) -> str:
    """The report in the FinOps FOCUS column layout (one Usage charge per team × GPU model,
    then the team's borrowing charge and lending credit)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(FOCUS_COLUMNS)
    for team in report["teams"]:
        for line, energy in _with_energy(team["lines"]):
            cost = line.cost
            writer.writerow(
                [
                    team["cost_centre"] or team["team"],
                    team["team_name"],
                    report["currency"],
                    report["period_start"],
                    report["period_end"],
                    report["period_start"],
                    report["period_end"],
                    "Usage",
                    "",
                    f"{line.gpu_model} GPU-hours",
                    "Usage-Based",
                    cost,
                    cost,
                    cost,
                    cost,
                    line.gpu_hours_used,
                    "GPU-Hours",
                    line.gpu_hours_allocated,
                    "GPU-Hours",
                    "Quartermaster",
                    "Quartermaster",
                    "Quartermaster",
                    "AI and Machine Learning",
                    "GPU compute",
                    "GPU",
                    line.gpu_model,
                    team["team"],
                    team["team_name"],
                    json.dumps({"department": team["department"], "basis": team["basis"]}),
                    *energy_cells(energy),
                ]  # fmt: skip
            )
        writer.writerows(_focus_ledger_rows(report, team))
        writer.writerows(_focus_reservation_rows(report, team))
        writer.writerows(_focus_fault_rows(report, team))
    return buf.getvalue()


XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

# Export format → (content type, renderer, file extension), shared by the pages and the API.
EXPORTS = {
    "csv": ("text/csv", report_csv, "csv"),
    "xlsx": (XLSX_TYPE, report_xlsx, "xlsx"),
    "focus": ("text/csv", report_focus_csv, "csv"),
}


def export_filename(*, month: str, fmt: str) -> str:
    suffix = "-focus" if fmt == "focus" else ""
    return f"gpu-report-{month}{suffix}.{EXPORTS[fmt][2]}"
