"""WAN emulation: link profiles shared by the simulator and (later) the live netem backends."""

from netem.profile import LinkProfile, load_profile

__all__ = ["LinkProfile", "load_profile"]
