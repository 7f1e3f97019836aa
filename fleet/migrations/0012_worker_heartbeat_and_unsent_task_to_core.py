# The worker heartbeat and the outbox move to core (issue #30): fleet forgets the models, their
# tables stay (core's 0001 takes them over by name).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0001_worker_heartbeat_and_unsent_task_from_fleet'),
        ('fleet', '0011_pool_mig_strategy'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='WorkerHeartbeat'),
                migrations.DeleteModel(name='UnsentTask'),
            ],
            database_operations=[],
        ),
    ]
