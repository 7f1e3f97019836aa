# The worker heartbeat and the outbox move from fleet to core (issue #30): only Django's picture
# of the models changes; their tables keep their names and their rows (no data moves).

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='WorkerHeartbeat',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('hostname', models.CharField(max_length=255, unique=True)),
                        ('nonce', models.CharField(blank=True, max_length=64)),
                        ('seen_at', models.DateTimeField()),
                    ],
                    options={
                        'db_table': 'fleet_workerheartbeat',
                    },
                ),
                migrations.CreateModel(
                    name='UnsentTask',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=200)),
                        ('args', models.JSONField(default=list)),
                        ('kwargs', models.JSONField(default=dict)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'fleet_unsenttask',
                        'ordering': ['pk'],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
