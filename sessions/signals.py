"""Signals the session store sends, for what lives outside it (the application's files,
its usage table).

``session_deleted(sender=Session, tenant_id, session_id)``: sent once the
transaction that deleted a session with its log has committed. The store knows
nothing of workspaces or uploads; the application removes them on this signal.

``session_deleting(sender=Session, session)``: sent inside the transaction that deletes
a session, before anything of it is deleted, so a receiver can still read its log,
and what it writes commits with the deletion or not at all. The application keeps the
usage the log had counted on it.

``session_imported(sender=Session, session)``: sent inside the transaction that
imported a log (``import_log``), so what a receiver writes commits with the import
or not at all. The application counts the imported replies' usage on it.
"""

from django.dispatch import Signal

session_deleted = Signal()
session_deleting = Signal()
session_imported = Signal()
