"""Test helpers that users of hf_bertology can reuse: a Hub-compatible HTTP server (`hub_server.HubServer`)."""

from .hub_server import HubServer

__all__ = ["HubServer"]
