"""Benchmarks: each module is a script (``python bench/<name>.py --help``); ``_common`` is what they share."""
