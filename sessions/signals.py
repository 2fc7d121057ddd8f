"""Signals the session store sends, for what lives outside it (the application's files).

``session_deleted(sender=Session, tenant_id, session_id)``: sent once the
transaction that deleted a session with its log has committed. The store knows
nothing of workspaces or uploads; the application removes them on this signal.
"""

from django.dispatch import Signal

session_deleted = Signal()
