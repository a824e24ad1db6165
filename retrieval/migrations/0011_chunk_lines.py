"""Each chunk's candidate answer lines with their embeddings (`halfvec`), written at ingestion.

The chunk's foreign key is declared in SQL: `retrieval_chunk` is partitioned by collection, so
its primary key is (id, collection_id) and a key referencing it names both; ON DELETE CASCADE,
so a replaced or deleted chunk takes its lines (Django's model says DO_NOTHING and leaves it
to the database). Documents ingested before this (`lines_version` 0) get their lines at the
next ingestion run (docs/ingestion.md).
"""

import django.db.models.deletion
import pgvector.django.halfvec
from django.conf import settings
from django.db import migrations, models

FOREIGN_KEY = """
ALTER TABLE retrieval_chunkline ADD CONSTRAINT retrieval_chunkline_chunk_fk
    FOREIGN KEY (chunk_id, collection_id) REFERENCES retrieval_chunk (id, collection_id)
    ON DELETE CASCADE;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0010_glossary_language"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="lines_version",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.CreateModel(
            name="ChunkLine",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.PositiveIntegerField()),
                ("text", models.TextField()),
                (
                    "embedding",
                    pgvector.django.halfvec.HalfVectorField(
                        dimensions=settings.CHATRAG_EMBEDDING_DIM
                    ),
                ),
                (
                    "chunk",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="lines",
                        to="retrieval.chunk",
                    ),
                ),
                (
                    "collection",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="retrieval.collection",
                    ),
                ),
            ],
            options={
                "ordering": ["chunk_id", "position"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("chunk", "position"), name="chunkline_unique_position"
                    )
                ],
            },
        ),
        migrations.RunSQL(
            FOREIGN_KEY,
            "ALTER TABLE retrieval_chunkline DROP CONSTRAINT retrieval_chunkline_chunk_fk;",
        ),
    ]
