"""A chunk's row is kept whole in its heap page: its embedding is no longer moved to TOAST.

pgvector stores a vector EXTERNAL, and Postgres moves such a value out of its row once the
row passes ~2 kB: a 384-dimension chunk row is ~3 kB, so every distance the vector leg
computed fetched its vector through the TOAST table's index (4 buffers a row; 22 ms of a
10k-chunk collection's exact scan). `toast_tuple_target` at its maximum keeps rows up to
8160 bytes inline; a bigger row (a large embedding) is still toasted. It applies to rows
written from now on: `VACUUM FULL retrieval_chunk` (or re-ingesting) rewrites earlier ones.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0007_evaluation_moves_to_quality"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE retrieval_chunk SET (toast_tuple_target = 8160)",
            "ALTER TABLE retrieval_chunk RESET (toast_tuple_target)",
        ),
    ]
