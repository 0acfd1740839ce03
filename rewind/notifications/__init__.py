"""Notifications: each event told once to every channel that should hear it, through Apprise or a built-in channel.

Kept free of imports on purpose: ``rewind.settings`` reads its URLs through
``rewind.notifications.config`` before any model can be loaded. Parts call
``rewind.notifications.services.notification_send``.
"""
