# The what-if runs and the quota auto-approval rule move to planning (issue #30): queues forgets
# the models, their tables stay (planning's 0001 takes them over by name).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('queues', '0029_whatif_claims'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='WhatIfRun'),
                migrations.DeleteModel(name='QuotaAutoApproval'),
            ],
            database_operations=[],
        ),
    ]
