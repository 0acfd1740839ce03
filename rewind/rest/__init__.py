"""REST API of the rewind app for people (session login + CSRF): audit, sites, guards, agents.

Each module holds the small views of one resource; querysets come from ``selectors`` and
every write calls the existing services, so it is audited with the person as the actor.
"""
