"""The settings the suite runs under: the service's own, made faster where nothing under test changes.

pytest-django exports ``DJANGO_SETTINGS_MODULE=tests.settings``, so the processes the tests start
(a Celery worker, uvicorn, ``manage.py``) read these too and accept the people the tests create.
"""

from rewind.settings import *  # noqa: F403

# The suite creates a few people for most tests; PBKDF2 at Django's iterations costs 0.6 s a
# password here, most of such a test's time. No test is about how passwords are stored.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
