"""LDN local wireless, simulated on loopback: the network and its advertisement frames, and the Local protocol."""
