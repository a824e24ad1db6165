# The evaluation cases and runs, taken over from the knowledge base (`retrieval.0007`): the
# models' state only. Their tables (retrieval_evalcase, its relevant_documents table and
# retrieval_evaluationrun) were created by `retrieval.0002` and keep their names and rows.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('conversations', '0003_access_log_lists'),
        ('retrieval', '0007_evaluation_moves_to_quality'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='EvalCase',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('question', models.TextField()),
                        ('history', models.JSONField(blank=True, default=list)),
                        ('category', models.CharField(choices=[('standalone', 'Standalone'), ('follow-up', 'Follow Up'), ('topic-switch', 'Topic Switch'), ('multi-topic', 'Multi Topic'), ('clarification', 'Clarification')], default='standalone', max_length=30)),
                        ('expect_clarification', models.BooleanField(default=False)),
                        ('language', models.CharField(blank=True, max_length=10)),
                        ('note', models.TextField(blank=True)),
                        ('active', models.BooleanField(default=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('collection', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='retrieval.collection')),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ('relevant_documents', models.ManyToManyField(blank=True, related_name='+', to='retrieval.document')),
                        ('source_message', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='conversations.message')),
                    ],
                    options={
                        'verbose_name': 'evaluation case',
                        'db_table': 'retrieval_evalcase',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.CreateModel(
                    name='EvaluationRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('source', models.CharField(choices=[('cases', 'Cases'), ('file', 'File')], default='cases', max_length=10)),
                        ('source_label', models.CharField(max_length=200)),
                        ('tasks', models.JSONField(blank=True, default=list)),
                        ('modes', models.JSONField(default=list)),
                        ('ks', models.JSONField(default=list)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=10)),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('done', models.PositiveIntegerField(default=0)),
                        ('report', models.JSONField(blank=True, default=dict)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('collection', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='retrieval.collection')),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'retrieval_evaluationrun',
                        'ordering': ['-created_at', '-id'],
                        'permissions': [('use_playground', 'Can compare retrieval configurations in the playground')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
