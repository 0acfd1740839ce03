"""Restore in place: a recovered file written back into its guest once a person read the diff (docs/restore.md)."""
