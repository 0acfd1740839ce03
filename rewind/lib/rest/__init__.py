"""The REST framework shared by every part: pagination and permissions.

Each part keeps its views in its own ``api`` module, reading through its selectors and
writing through its services, so every write is audited with the person as the actor.
"""
