"""What a person has said about changes in general: the policy's version, the rules that raise a
change to "a person approves it first", and the stop switches that halt guarded changes.

The parts that decide a call read these afresh on every call (never a cache that expires by
time), so a change made here decides the very next call in every process. A catalog entry and
an upstream tool's policy say how their calls are decided (``checkpoint``, ``approve``,
``deny``); the VM rules here and an agent's "every change needs a person" raise a ``checkpoint``
to ``approve``. Every change of any of them raises the policy's version (``policy_version_raise``),
and every decision records the version it was made under.
"""
