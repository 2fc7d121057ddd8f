"""Settings modules: ``dev`` (default, ``make run``), ``production`` and ``test``.

``base`` reads the environment once; nothing outside this package reads
``os.environ`` for configuration.
"""
