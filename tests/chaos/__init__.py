"""The chaos suite: gateway processes on their own PostgreSQL under a fault schedule from a seed,
checked against the reference merge (``harness.py`` runs it, ``schedule.py`` and ``checks.py``
are its pure parts)."""
