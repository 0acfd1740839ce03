"""The operators' console: the admin index as a dashboard, and the admin's models grouped by what
operators do.

The admin site (``site.OperatorsAdminSite``) is installed by ``apps.OperatorsAdminConfig`` in
place of Django's. A section of the dashboard is one selector (a function of ``now`` returning
what the section shows, database reads only, in one of the modules here) and one template
(``templates/admin/dashboard/<key>.html``), listed once in ``sections.SECTIONS`` with the
permission that may see it. Numbers are ``links.Count``: the value and the admin list that
shows exactly the rows counted.
"""
