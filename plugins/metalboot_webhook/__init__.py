"""Webhook notifier: POSTs every metalboot event to a URL (a pluggy hook plugin)."""
