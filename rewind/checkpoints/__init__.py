"""Tagged checkpoints and guard-before-mutate (services, the wait, reports)."""
