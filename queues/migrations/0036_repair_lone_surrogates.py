# Rows written before input was checked may hold a lone UTF-16 surrogate in a JSON column (only
# on SQLite, the embedded default): each becomes U+FFFD, so no page or list fails to render it.

from functools import partial

from django.db import migrations

from core.text import repair_lone_surrogates


class Migration(migrations.Migration):
    dependencies = [("queues", "0035_quota_request_names_its_limits")]

    operations = [
        migrations.RunPython(
            partial(repair_lone_surrogates, app_label="queues"), migrations.RunPython.noop
        ),
    ]
