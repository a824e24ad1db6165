# Django's content types of the two models follow them from `retrieval` to `quality`, so the
# permissions already granted (to add evaluation cases, to use the playground...) and the
# admin's history of these objects stay with them. Only django_content_type rows change; on a
# new database there are none yet (they are made after migrating, for the new label).

from django.db import migrations

MODELS = ('evalcase', 'evaluationrun')


def _relabel(apps, schema_editor, old, new):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    for model in MODELS:
        taken = ContentType.objects.using(db).filter(app_label=new, model=model).exists()
        if not taken:
            ContentType.objects.using(db).filter(app_label=old, model=model).update(app_label=new)


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, 'retrieval', 'quality')


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, 'quality', 'retrieval')


class Migration(migrations.Migration):

    dependencies = [
        ('quality', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
