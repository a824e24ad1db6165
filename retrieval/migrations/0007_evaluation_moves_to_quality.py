# The evaluation cases and runs move to the quality app (conversations.quality): EvalCase has
# a foreign key into conversations, which made the knowledge base depend on the chat. Only
# Django's record of the models moves; their tables and rows stay as they are
# (`quality.0001_initial` takes the models over under the same table names).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('retrieval', '0006_vocabulary_version'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='EvalCase'),
                migrations.DeleteModel(name='EvaluationRun'),
            ],
            database_operations=[],
        ),
    ]
