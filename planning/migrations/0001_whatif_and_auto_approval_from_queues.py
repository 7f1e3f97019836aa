# The what-if runs and the quota auto-approval rule move from queues to planning (issue #30):
# only Django's picture of the models changes; their tables keep their names and their rows (no
# data moves). queues' 0030 forgets them.

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('queues', '0029_whatif_claims'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='QuotaAutoApproval',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('enabled', models.BooleanField(default=False)),
                        ('min_usage_percent', models.PositiveSmallIntegerField(default=90, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)])),
                        ('max_increase_gpus', models.PositiveIntegerField(default=4, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10000)])),
                        ('max_increase_percent', models.PositiveIntegerField(default=50, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1000)])),
                        ('lookback_days', models.PositiveSmallIntegerField(default=30, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(365)])),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'verbose_name': 'quota auto-approval rule',
                        'db_table': 'queues_quotaautoapproval',
                    },
                ),
                migrations.CreateModel(
                    name='WhatIfRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=200)),
                        ('days', models.PositiveSmallIntegerField(default=30)),
                        ('proposal', models.JSONField(default=dict)),
                        ('state', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=16)),
                        ('error', models.TextField(blank=True)),
                        ('result', models.JSONField(blank=True, null=True)),
                        ('seconds', models.FloatField(blank=True, null=True)),
                        ('applied_at', models.DateTimeField(blank=True, null=True)),
                        ('applied_requests', models.JSONField(blank=True, default=list)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('dispatched_at', models.DateTimeField(blank=True, null=True)),
                        ('claimed_by', models.CharField(blank=True, max_length=255)),
                        ('claimed_at', models.DateTimeField(blank=True, null=True)),
                        ('created_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='whatif_runs', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'queues_whatifrun',
                        'ordering': ['-created_at'],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
