"""`manage.py whatif_agreement`: does the replay of today's configuration give back the recorded
history? Per team, the replayed and recorded median and p90 waits over the window, as the
what-if page judges them."""

from django.core.management.base import BaseCommand, CommandError

from core.durations import duration_text
from planning.services.whatif import MAX_DAYS, whatif_compute
from queues.models import Team


def _cell(q: dict) -> str:
    diff = "" if q["difference_percent"] is None else f" ({q['difference_percent']:g} %)"
    return f"{duration_text(q['replayed'])} / {duration_text(q['recorded'])}{diff}"


class Command(BaseCommand):
    help = (
        "Replay the last DAYS of jobs with today's configuration and print, per team, the "
        "replayed / recorded median and p90 waits, whether they agree (within 10 % or a "
        "minute) and how many of its jobs started otherwise than recorded; exits 1 when they "
        "do not, after the reasons the what-if page gives."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=30, help="The window (default 30).")

    def handle(self, *args, days, **options):
        if not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days must be between 1 and {MAX_DAYS}.")
        result = whatif_compute(days=days, proposal={})
        agreement = result["agreement"]
        names = dict(Team.objects.values_list("pk", "name"))
        rows = [("team", "jobs", "p50 replayed / recorded", "p90 replayed / recorded", "agrees",
                 "started otherwise")]  # fmt: skip
        teams = sorted(agreement["teams"].items(), key=lambda t: names.get(int(t[0]), ""))
        for team_id, qs in teams:
            rows.append((
                names.get(int(team_id), str(team_id)),
                str(result["today"]["teams"][team_id]["jobs"]),
                _cell(qs["p50"]), _cell(qs["p90"]),
                "yes" if qs["p50"]["agrees"] and qs["p90"]["agrees"] else "no",
                str(agreement["otherwise_by_team"].get(team_id, 0)),
            ))  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            self.stdout.write(line.rstrip())
        self.stdout.write(
            f"{result['jobs']} jobs from {result['window_start'][:16]} to "
            f"{result['window_end'][:16]} UTC ({result['carried_over']} carried over); "
            f"{agreement['jobs_otherwise']} started otherwise than recorded."
        )
        if agreement["agrees"]:
            self.stdout.write(self.style.SUCCESS("The replay gives back what happened."))
            return
        for reason in agreement["reasons"]:
            self.stdout.write(f"- {reason}")
        worst = agreement["worst"]
        raise CommandError(
            f"The replay differs from the history: {worst['team']}'s {worst['quantile']} wait "
            f"{duration_text(worst['replayed'])} replayed, {duration_text(worst['recorded'])} "
            "as it happened."
        )
