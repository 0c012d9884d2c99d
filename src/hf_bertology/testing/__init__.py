"""Test helpers that users of hf_bertology can reuse: a Hub-compatible HTTP server (`hub_server.HubServer`) and a
counter of the operations that make the host wait for the device (`host_syncs.HostSyncs`)."""

from .host_syncs import HostSyncs
from .hub_server import HubServer

__all__ = ["HostSyncs", "HubServer"]
