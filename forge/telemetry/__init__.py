"""What operators watch: Prometheus metrics (``metrics``, served by ``endpoint``).

Every metric is declared once, in :mod:`forge.telemetry.metrics`, with a ``forge_``
name; the code that does the work calls one small function there. Telemetry sits
beside forge's layers, not inside them: any layer may report to it, and it imports
nothing of the runtime, the faces, the tools or the providers (import-linter).
"""
