"""Calls held for a person: a change whose decision is ``approve`` is checkpointed first, then waits
here until people approve exactly that call (or deny it, or it expires).

A held call binds the agent, the tool, the RFC 8785 digest of its exact arguments
(``rewind.approvals.jcs``), the VM, the checkpoint ids, the policy version and an expiry. Through
the gateway (``mode`` gateway) the approved arguments are forwarded once, by whoever claims the
release first (``held_call_claim``: the waiting call, or the task queued on approval), after the
policy and the checkpoints are checked again (``rewind.gateway.release``). For the guard alone
(``mode`` guard) the person's decision is what the agent reads: it makes the call itself.
"""
