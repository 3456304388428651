"""LAN play: discovery (browse request/reply with the crypto challenge) and a LAN session over mesh nodes."""
