"""Captures: pcap/pcapng/JSON Lines I/O, session files, and the decoder behind ``pianode decode``."""
