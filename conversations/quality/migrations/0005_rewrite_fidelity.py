"""Rewrite fidelity review: a sample of turns' rewrites queued for staff to judge.

A new table only (reversible: migrating back to 0003 drops it).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0003_access_log_lists'),
        ('quality', '0004_promotion_gate'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='RewriteFidelity',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('policy', models.CharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('verdict', models.CharField(choices=[('pending', 'Pending'), ('faithful', 'Faithful'), ('unfaithful', 'Unfaithful')], default='pending', max_length=12)),
                ('note', models.TextField(blank=True)),
                ('reviewed_at', models.DateTimeField(blank=True, null=True)),
                ('message', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='conversations.message')),
                ('reviewer', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'rewrite fidelity review',
                'ordering': ['-created_at', '-id'],
                'indexes': [models.Index(fields=['verdict', 'created_at'], name='quality_fidelity_verdict')],
                'constraints': [models.CheckConstraint(condition=models.Q(models.Q(('reviewed_at__isnull', True), ('verdict', 'pending')), models.Q(models.Q(('verdict', 'pending'), _negated=True), ('reviewed_at__isnull', False)), _connector='OR'), name='quality_fidelity_judged_when')],
            },
        ),
    ]
