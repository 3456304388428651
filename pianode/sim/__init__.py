"""Simulation: fault injection, the in-memory network, and the scripted multi-node runs of ``pianode mesh``."""
