"""Usage and budgets (issue 22): what each tenant, user, agent and model used, per UTC
day, and the monthly limits that refuse a prompt.

``fold``: the rule, a pure function of a reply's message and parts (and of a whole
log, for ``rebuild_usage``). ``services``: the writes (recording a completed reply in
its own transaction, rebuilding, setting budgets). ``selectors``: the reads (the
usage API, a month's use). ``budgets``: the check a prompt passes before anything
is written.
"""
