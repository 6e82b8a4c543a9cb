"""Native notification sinks (``[[notify]]``): ntfy, Slack, Discord, Telegram, email and a generic webhook.

``message`` turns the fleet state into what an operator reads, ``sinks`` renders it in each sink's own format,
``deliver`` posts it (retries, backoff, ``Retry-After``, no redirects), ``dispatch`` decides when (edge
triggered, a minimum duration, grouping, rate limits, quiet hours), ``command`` is ``fleet-console notify``.
"""
