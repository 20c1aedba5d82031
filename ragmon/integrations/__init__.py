"""Ready-made instrumentation of third-party clients, one optional module per library.

Each module imports its library when *it* is imported, never when ``ragmon`` is: ``import ragmon`` stays free of
optional dependencies. Import the one you need::

    from ragmon.integrations import openai as ragmon_openai
    ragmon_openai.instrument(client)
"""

from __future__ import annotations

__all__: list[str] = []
