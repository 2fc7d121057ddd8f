"""The event's ``data`` becomes :class:`sessions.models.EventDataField`: a message's or a
part's event stores its data without ``session_id`` (the row's column holds it), and
every read puts it back. No schema change: the column stays ``jsonb`` / JSON text, the
rows stored before keep the key and read the same. State only, so that SQLite does not
remake the table (which would drop its append-only triggers).

Going back below this migration changes nothing stored: events written since keep
their data without those keys, and code from before it, which reads ``data`` as the
wire form, would see them without ``session_id`` (its ``verify_chain`` would then
report them). Downgrade only a database written before it, or restore a backup."""

import sessions.models
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0013_import_ids_taken")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="sessionevent",
                    name="data",
                    field=sessions.models.EventDataField(),
                )
            ]
        )
    ]
