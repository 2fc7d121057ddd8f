"""Signals the session store sends, for what lives outside it (the application's files,
its usage table).

``session_deleted(sender=Session, tenant_id, session_id)``: sent once the
transaction that deleted a session with its log has committed, and for a fork or an
import's copy that failed (its rows rolled back, never what ``part_copying``'s receivers
stored beside them). The store knows nothing of workspaces or uploads; the application
removes them on this signal.

``session_deleting(sender=Session, session)``: sent inside the transaction that deletes
a session, before anything of it is deleted, so a receiver can still read its log,
and what it writes commits with the deletion or not at all. The application keeps the
usage the log had counted on it.

``session_imported(sender=Session, session)``: sent inside the transaction that
imported a log (``import_log``), so what a receiver writes commits with the import
or not at all. The application ends the replies the log left open on it; once the
receivers ran, the import marks everything logged so far as copied
(``Session.copied_through``), which usage never bills.

``part_copying(sender=Session, part, session, files)``: sent for each part a copy is about
to write (a fork, an import's copy), inside its transaction, with ``part`` the copy's
part (its ids already renamed: :func:`sessions.services.transfer.remap_ids`),
``session`` the copy and ``files`` a set that lives as long as the copy is made, for
the receivers' notes. A receiver may return the part to write instead (the last
answer that is not None wins). The store knows nothing of stored files; the
application copies a ``file`` part's file to the copy and names it there, each stored
file once per copy.

``history_copied(sender=Session, source_id, copy, new_ids)``: sent inside the
transaction of a fork or an import's copy once its history is written, with
``source_id`` the session it was copied from (which may exist here no more, or never
did) and ``new_ids`` its messages' ids, original -> copy's, in creation order. The store
knows nothing of memory; the application carries over what memory had rolled of the
source (the cut of the model's view), which no event of the source's log says yet.
"""

from django.dispatch import Signal

session_deleted = Signal()
session_deleting = Signal()
session_imported = Signal()
part_copying = Signal()
history_copied = Signal()
