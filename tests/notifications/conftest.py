"""Notifications share the webhook receiver and the eager-task fixtures of tests/fixtures.py."""
