"""Alert channels (webhook, log) and the dispatcher that deduplicates and counts deliveries."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ragmon.drift.channels.base import Channel, ChannelStats, Delivery, Dispatcher
from ragmon.drift.channels.log import LogChannel
from ragmon.drift.channels.payloads import json_payload, slack_payload
from ragmon.drift.channels.webhook import WebhookChannel
from ragmon.drift.rules import LOG_CHANNEL, AlertsConfig, ChannelConfig, LogChannelConfig
from ragmon.retry import RetryPolicy


def build_channel(name: str, config: ChannelConfig) -> Channel:
    if isinstance(config, LogChannelConfig):
        return LogChannel(name, logging.getLogger(config.logger))
    return WebhookChannel(
        config.url,
        name=name,
        payload_format=config.format,
        headers={key: value.get_secret_value() for key, value in config.headers.items()},
        timeout_s=config.timeout_s,
        retry=RetryPolicy(
            max_attempts=config.max_attempts,
            initial_backoff_s=config.initial_backoff_s,
            max_backoff_s=config.max_backoff_s,
            deadline_s=config.deadline_s,
        ),
    )


def build_channels(config: AlertsConfig) -> Mapping[str, Channel]:
    """Every configured channel, plus "log" (always defined)."""
    channels: dict[str, Channel] = {LOG_CHANNEL: LogChannel(LOG_CHANNEL)}
    for name, entry in config.channels.items():
        channels[name] = build_channel(name, entry)
    return channels


def build_dispatcher(config: AlertsConfig) -> Dispatcher:
    return Dispatcher(build_channels(config), dedup_entries=config.dedup_entries)


__all__ = [
    "Channel",
    "ChannelStats",
    "Delivery",
    "Dispatcher",
    "LogChannel",
    "WebhookChannel",
    "build_channel",
    "build_channels",
    "build_dispatcher",
    "json_payload",
    "slack_payload",
]
