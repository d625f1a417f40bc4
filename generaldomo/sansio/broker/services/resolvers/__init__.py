"""Built-in service resolvers beyond plain names: ``attributes`` and ``balanced``.

Each is also registered in the ``generaldomo.resolvers`` entry-point group, where third-party packages add
theirs; ``generaldomo broker --resolver NAME`` loads one by name.
"""

__all__: list[str] = []
