# Load the Celery app with Django so shared_task binds to it.
from rewind.celery import app as celery_app

# The release, as in pyproject.toml (the project is not installed as a package, so it is kept here too;
# a test checks that both say the same). MCP clients see it as serverInfo.version.
__version__ = "0.1.0"

__all__ = ("__version__", "celery_app")
