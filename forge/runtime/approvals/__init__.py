"""Durable tool approvals (docs/approvals.md).

* ``rules``: which action (allow, ask, deny) a call gets, from the agent's rules and
  ``FORGE_TOOL_APPROVAL``;
* ``pending``: reading and closing waiting calls inside a transaction (the prompt
  path and the answer path share it);
* ``services``: answering a waiting call (``answer``; several of one reply at once:
  ``answer_all``) and expiring the overdue ones, then going on with the turn in this
  process.

Nothing is imported here: ``services`` imports the runner, which imports the
prompt path, which imports ``pending``.
"""
